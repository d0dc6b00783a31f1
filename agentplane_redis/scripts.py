"""Finds the Lua scripts, expands their includes and reads their headers.

One operation is one file in ``lua/``; helpers live in ``lua/_lib/`` and are
pulled in with a line ``--@include _lib/name.lua``. Expansion is static and
deterministic, so a script's SHA never changes at runtime. An include that is
missing or circular is an error; one repeated is expanded once.

The header names each key by role (``-- KEYS[1] events: ...``). The loader
binds them, right after the header, as ``local K = { events = KEYS[1], ... }``,
and callers pass ``TenantKeys.for_roles(script.roles)``: the header is the one
statement of a script's keys, so their count and order cannot drift.

Expansion pulls in whole helper files; the loader then drops every top-level
``local function`` the script never reaches (from its own lines, through the
helpers it calls), so Redis defines on each call only the helpers the script
uses. A top-level function is written from ``local function name(`` to a line
holding only ``end``, its body indented.

A script whose header names the ``replies`` key is a writing script: it takes
its store's lane and the call's number on it (the call token) as its last two
arguments, which the loader binds as ``TOKEN`` and ``SEQ`` and strips from
``ARGV``, so the body and its header's ``ARGV[i]`` lines never see them
(``lua/_lib/core.lua``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from .errors import AgentplaneRedisError
from .keys import BUCKETED, ROLES

_INCLUDE = re.compile(r"^--@include\s+(\S+)\s*$")
_FUNCTION = re.compile(r"^local function ([A-Za-z_][A-Za-z0-9_]*)\(")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS_LINE = re.compile(r"^-- KEYS\[(\d+)\] ([a-z_]+):")
_FLAGS_LINE = re.compile(r"^-- Flags: ([a-z-]+(?:, [a-z-]+)*)")
#: The Functions flags a header may declare. ``allow-oom``: the operation frees
#: memory on balance, so it must run when the server is at ``maxmemory``.
FLAGS = ("allow-oom",)


class ScriptError(AgentplaneRedisError):
    """A script file that cannot be loaded (a packaging or development error)."""


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One operation's script, includes expanded."""

    name: str
    roles: tuple[str, ...]
    source: str
    #: The SHA1 that EVALSHA names the script by.
    sha: str
    #: The Functions flags its header declares (``-- Flags:``), besides ``no-writes``.
    flags: tuple[str, ...] = ()

    @property
    def writes(self) -> bool:
        """Whether the script may write: it then takes a call token (see above)."""
        return "replies" in self.roles


def lua_root() -> Path:
    """The folder holding the scripts: inside the wheel, or the checkout's ``lua/``."""
    packaged = resources.files("agentplane_redis") / "lua"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "lua"


def expand(root: Path, name: str) -> str:
    """The text of ``name`` with every include expanded once, in order of first use."""
    seen: set[str] = set()

    def walk(rel: str, stack: tuple[str, ...]) -> list[str]:
        if rel in stack:
            raise ScriptError("circular include: " + " -> ".join((*stack, rel)))
        path = root / rel
        if not path.is_file():
            where = f" (included from {stack[-1]})" if stack else ""
            raise ScriptError(f"missing script file {rel}{where}")
        out: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _INCLUDE.match(line)
            if match is None:
                out.append(line)
                continue
            target = match.group(1)
            if target in stack:
                raise ScriptError("circular include: " + " -> ".join((*stack, rel, target)))
            if target not in seen:
                seen.add(target)
                out.extend(walk(target, (*stack, rel)))
        return out

    return "\n".join(walk(name, ())) + "\n"


def prune(text: str, name: str = "") -> str:
    """``text`` without the top-level ``local function`` blocks that its other lines
    never reach, directly or through the functions they keep."""
    lines = text.split("\n")
    blocks: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(lines):
        match = _FUNCTION.match(lines[i])
        if match is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != "end":
            if lines[end][:1] not in ("", " ", "-"):
                raise ScriptError(f"{name}: {match.group(1)} ends without a line 'end'")
            end += 1
        if end == len(lines):
            raise ScriptError(f"{name}: {match.group(1)} ends without a line 'end'")
        blocks[match.group(1)] = (i, end)
        i = end + 1
    inside = {n for first, last in blocks.values() for n in range(first, last + 1)}
    uses = {
        fn: set(_NAME.findall("\n".join(lines[first + 1 : last])))
        for fn, (first, last) in blocks.items()
    }
    reached: set[str] = set()
    todo = [
        word
        for n, line in enumerate(lines)
        if n not in inside
        for word in _NAME.findall(line)
        if word in blocks
    ]
    while todo:
        fn = todo.pop()
        if fn not in reached:
            reached.add(fn)
            todo.extend(word for word in uses[fn] if word in blocks and word not in reached)
    unused = [span for fn, span in blocks.items() if fn not in reached]
    dropped = {n for first, last in unused for n in range(first, last + 1)}
    return "\n".join(line for n, line in enumerate(lines) if n not in dropped)


def header_roles(text: str, name: str) -> tuple[str, ...]:
    """The key roles a script's header declares, checked to be numbered 1..n."""
    roles: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _KEYS_LINE.match(line)
        if match is None:
            continue
        index, role = int(match.group(1)), match.group(2)
        if index != len(roles) + 1:
            raise ScriptError(f"{name}: KEYS[{index}] out of order")
        if role not in ROLES:
            raise ScriptError(f"{name}: unknown key role {role!r}")
        roles.append(role)
    return tuple(roles)


#: What a writing script binds before its body: the call token, its lane and its
#: number on the lane, its last two arguments, taken off ARGV (which is not copied).
_TOKEN_BINDING = """local TOKEN, SEQ = ARGV[#ARGV - 1], ARGV[#ARGV]
ARGV[#ARGV] = nil
ARGV[#ARGV] = nil"""
_NO_TOKEN = "local TOKEN, SEQ = nil, nil"
#: What a script with a bucket key binds next: the bucket geometry the client
#: computed its bucket keys with, its last argument before the token.
_GEO_BINDING = """local GEO = ARGV[#ARGV]
ARGV[#ARGV] = nil"""
_NO_GEO = "local GEO = nil"


def bucketed(roles: Sequence[str]) -> bool:
    """Whether a script with these roles takes a bucket key, and so the geometry."""
    return any(role in BUCKETED for role in roles)


def header_flags(text: str, name: str) -> tuple[str, ...]:
    """The Functions flags a script's header declares."""
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _FLAGS_LINE.match(line)
        if match is not None:
            flags = tuple(match.group(1).split(", "))
            unknown = set(flags) - set(FLAGS)
            if unknown:
                raise ScriptError(f"{name}: unknown flags {sorted(unknown)}")
            return flags
    return ()


def bind_keys(text: str, roles: tuple[str, ...]) -> str:
    """The script with its header's keys bound to ``K`` right after the header,
    and the call token bound for a writing script."""
    header, _, body = text.partition("\n\n")
    fields = "".join(f"  {role} = KEYS[{i}],\n" for i, role in enumerate(roles, 1))
    fields += f"  roles = {len(roles)},\n"
    token = _TOKEN_BINDING if "replies" in roles else _NO_TOKEN
    geo = _GEO_BINDING if bucketed(roles) else _NO_GEO
    return f"{header}\n\nlocal K = {{\n{fields}}}\n{token}\n{geo}\n\n{body}"


def load(root: Path, name: str) -> LuaScript:
    text = prune(expand(root, f"{name}.lua"), name)
    roles = header_roles(text, name)
    source = bind_keys(text, roles)
    sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
    return LuaScript(name, roles, source, sha, header_flags(text, name))


@cache
def catalogue() -> Mapping[str, LuaScript]:
    """Every operation script shipped with the package, by name."""
    root = lua_root()
    return {p.stem: load(root, p.stem) for p in sorted(root.glob("*.lua"))}


@dataclass(frozen=True, slots=True)
class LuaLibrary:
    """Every operation as one Redis Functions library (``FUNCTION LOAD``).

    Its name carries a version taken from its source, and so does each function's,
    so two releases' libraries load side by side during a rolling upgrade.
    """

    name: str
    version: str
    source: str
    #: The function that runs each operation, by operation name.
    functions: Mapping[str, str]


#: The library's first lines: ``string``, ``table`` and ``redis`` as its own upvalues,
#: so that a helper's ``string.find`` or ``redis.call`` reads a local, not a global
#: through the environment Redis guards. The load may read no global but ``redis``
#: (the load's own, which registers the functions), so the first call binds them
#: (``_ENTRY``), through a function written before they are declared, whose names
#: are the globals. ``OPS`` holds it, to keep under Lua's 200 locals.
_LIBRARIES = """local OPS = {
  libraries = function()
    return string, table, redis
  end,
}
local string, table, redis = nil, nil, redis"""


#: Where each operation's callback starts: the call's keys, token and arguments bound
#: to the library's upvalues that the helpers read, and the clock read afresh. Each
#: operation names its keys by role in a table of its own, made once and written
#: anew by each call (``bound``), so a call allocates no table for them.
_ENTRY = """local function bound(fill)
  local k = {}
  return function(keys)
    fill(k, keys)
    return k
  end
end

local function entry(op, bind, writes, bucketed)
  return function(keys, args)
    if not string then
      string, table, redis = OPS.libraries()
    end
    KEYS, K, server_ms = keys, bind(keys), nil
    if writes then -- the call token, a lane and a number, comes last
      local n = #args
      TOKEN, SEQ = args[n - 1], args[n]
      args[n], args[n - 1] = nil, nil
    else
      TOKEN, SEQ = nil, nil
    end
    if bucketed then -- then the bucket geometry the keys were computed with
      local n = #args
      GEO, args[n] = args[n], nil
    else
      GEO = nil
    end
    ARGV = args
    return op()
  end
end"""


def key_binding(roles: tuple[str, ...]) -> str:
    """The Lua expression that binds an operation's keys by role (``_ENTRY``'s
    ``bind``): one table, filled anew by each call."""
    fields = ", ".join([*(f"k.{role}" for role in roles), "k.roles"])
    values = ", ".join([*(f"keys[{i}]" for i in range(1, len(roles) + 1)), str(len(roles))])
    return f"bound(function(k, keys) {fields} = {values} end)"


_VERSION = "@VERSION@"


def _helper_order(orders: list[list[str]]) -> list[str]:
    """The helper files in an order that keeps every script's own include order."""
    after: dict[str, set[str]] = {}
    first: dict[str, int] = {}
    for order in orders:
        for i, name in enumerate(order):
            first.setdefault(name, len(first))
            after.setdefault(name, set()).update(order[:i])
    out: list[str] = []
    while len(out) < len(first):
        ready = [n for n in first if n not in out and after[n] <= set(out)]
        if not ready:
            raise ScriptError("helpers included in contradictory orders: " + ", ".join(first))
        out.append(min(ready, key=first.__getitem__))
    return out


def build_library(
    root: Path, scripts: Mapping[str, LuaScript], prefix: str = "agentplane"
) -> LuaLibrary:
    """The library of ``scripts``: each helper file once, each script's body as a
    function, and a ``redis.register_function`` per operation (``no-writes`` for the
    reading ones)."""
    orders: list[list[str]] = []
    bodies: dict[str, list[str]] = {}
    for name in scripts:
        header, _, body = (root / f"{name}.lua").read_text(encoding="utf-8").partition("\n\n")
        includes, kept = [], [f"  {line}" if line else "" for line in header.splitlines()]
        for line in body.splitlines():
            match = _INCLUDE.match(line)
            if match is None:
                kept.append(f"  {line}" if line else "")
            else:
                includes.append(match.group(1))
        orders.append(includes)
        bodies[name] = kept
    helpers = [(root / rel).read_text(encoding="utf-8") for rel in _helper_order(orders)]
    ops = [
        f"OPS[{name!r}] = function()\n" + "\n".join(lines).rstrip() + "\nend"
        for name, lines in bodies.items()
    ]
    registered = []
    for name, script in scripts.items():
        bind = key_binding(script.roles)
        declared = (*(() if script.writes else ("no-writes",)), *script.flags)
        quoted = ", ".join(f'"{flag}"' for flag in declared)
        flags = f", flags = {{ {quoted} }}" if declared else ""
        registered.append(
            f"redis.register_function({{ function_name = '{prefix}_{_VERSION}_{name}', callback"
            f" = entry(OPS[{name!r}], {bind}, {str(script.writes).lower()},"
            f" {str(bucketed(script.roles)).lower()}){flags} }})"
        )
    source = "\n\n".join(
        [
            f"#!lua name={prefix}_{_VERSION}",
            _LIBRARIES,
            "local KEYS, ARGV, K, TOKEN, SEQ, GEO",
            *helpers,
            *ops,
            _ENTRY,
            *registered,
        ]
    )
    # The version is the source's own digest, taken with a placeholder in its place.
    version = hashlib.sha1(source.encode("utf-8")).hexdigest()[:12]
    functions = {name: f"{prefix}_{version}_{name}" for name in scripts}
    source = source.replace(_VERSION, version)
    return LuaLibrary(f"{prefix}_{version}", version, source + "\n", functions)


@cache
def library() -> LuaLibrary:
    """The library of every operation shipped with the package."""
    return build_library(lua_root(), catalogue())
