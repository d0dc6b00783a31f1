"""A key guard for scripts on fakeredis: every key a command names must be in KEYS.

Prepended to each script on the fakeredis backend (real servers run the
shipped scripts unmodified and protect the ``redis`` table). Together with the
syntactic lint in test_scripts.py it proves contract 7.1: no script touches a
key it was not given.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from agentplane_redis.scripts import LuaScript

PRELUDE = """\
local unguarded = rawget(redis, "_unguarded") or { call = redis.call, pcall = redis.pcall }
rawset(redis, "_unguarded", unguarded)
local declared = {}
for _, k in ipairs(KEYS) do
  declared[k] = true
end
local function guard(f)
  return function(cmd, ...)
    local key = ...
    if string.upper(cmd) ~= "TIME" and not declared[key] then
      error("script touched an undeclared key: " .. cmd .. " " .. string.format("%q", key))
    end
    return f(cmd, ...)
  end
end
redis.call = guard(unguarded.call)
redis.pcall = guard(unguarded.pcall)
"""


def guarded(scripts: dict[str, LuaScript]) -> dict[str, LuaScript]:
    out = {}
    for name, script in scripts.items():
        source = PRELUDE + script.source
        sha = hashlib.sha1(source.encode()).hexdigest()
        out[name] = replace(script, source=source, sha=sha)
    return out
