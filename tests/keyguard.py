"""A key guard for scripts on fakeredis: every key a command names must be in KEYS.

Prepended to each script on the fakeredis backend; in the library built for it,
every ``redis.call`` goes through the same check (real servers run the shipped
scripts and library unmodified and protect the ``redis`` table). Together with the
syntactic lint in test_scripts.py it proves contract 7.1: no script touches a
key it was not given.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from agentplane_redis.scripts import LuaLibrary, LuaScript, build_library, lua_root

#: The library's guard: redis.table is read-only in a library, so its calls are
#: routed through these instead.
LIBRARY_GUARD = """
local key_guard = {}
function key_guard.check(cmd, key)
  if string.upper(cmd) ~= "TIME" then
    for _, k in ipairs(KEYS) do
      if k == key then
        return
      end
    end
    error("script touched an undeclared key: " .. cmd .. " " .. string.format("%q", key))
  end
end
function key_guard.call(cmd, ...)
  key_guard.check(cmd, ...)
  return redis.call(cmd, ...)
end
function key_guard.pcall(cmd, ...)
  key_guard.check(cmd, ...)
  return redis.pcall(cmd, ...)
end
"""

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


def guarded_library(scripts: dict[str, LuaScript], root: Path | None = None) -> LuaLibrary:
    library = build_library(root or lua_root(), scripts, prefix="agentplane_guarded")
    head, sep, rest = library.source.partition("local KEYS, ARGV, K, TOKEN, SEQ, GEO\n")
    assert sep, "the library declares its call's upvalues"
    # One local, which the library leaves room for under Lua's 200 (scripts.py).
    rest = rest.replace("redis.call(", "key_guard.call(")
    rest = rest.replace("redis.pcall(", "key_guard.pcall(")
    return replace(library, source=head + sep + LIBRARY_GUARD + rest)
