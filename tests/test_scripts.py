"""The script machinery: includes, headers, the key lint, loading and NOSCRIPT."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from agentplane_redis import ops
from agentplane_redis.codec import EPOCH
from agentplane_redis.keys import ROLES, event_id, instant_member
from agentplane_redis.scripts import (
    ScriptError,
    catalogue,
    expand,
    header_roles,
    load,
    lua_root,
    prune,
)

from helpers import T0, at, ev, sub
from keyguard import PRELUDE

# ------------------------------------------------------------ the include expander


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_includes_are_expanded_in_place(tmp_path):
    """An include line is replaced by the file's text, nested includes too."""
    root = write(
        tmp_path,
        {
            "op.lua": "-- op\n--@include _lib/a.lua\nreturn a()\n",
            "_lib/a.lua": "--@include _lib/b.lua\nlocal function a() return b() end\n",
            "_lib/b.lua": "local function b() return 1 end\n",
        },
    )
    assert expand(root, "op.lua") == (
        "-- op\nlocal function b() return 1 end\nlocal function a() return b() end\nreturn a()\n"
    )


def test_a_repeated_include_is_expanded_once(tmp_path):
    """A helper included twice (directly and through another) appears once."""
    root = write(
        tmp_path,
        {
            "op.lua": "--@include _lib/a.lua\n--@include _lib/b.lua\n--@include _lib/a.lua\n",
            "_lib/a.lua": "--@include _lib/b.lua\nA\n",
            "_lib/b.lua": "B\n",
        },
    )
    assert expand(root, "op.lua") == "B\nA\n"


def test_a_missing_include_is_an_error(tmp_path):
    """A missing file is named, with the file that included it."""
    root = write(tmp_path, {"op.lua": "--@include _lib/nope.lua\n"})
    with pytest.raises(ScriptError, match=r"missing script file _lib/nope.lua \(included from op"):
        expand(root, "op.lua")


def test_a_circular_include_is_an_error(tmp_path):
    """A cycle is reported with its path."""
    root = write(
        tmp_path,
        {
            "op.lua": "--@include _lib/a.lua\n",
            "_lib/a.lua": "--@include _lib/b.lua\n",
            "_lib/b.lua": "--@include _lib/a.lua\n",
        },
    )
    cycle = r"circular include: op\.lua -> _lib/a\.lua -> _lib/b\.lua"
    with pytest.raises(ScriptError, match=cycle):
        expand(root, "op.lua")


def test_header_keys_must_be_numbered_in_order_and_known(tmp_path):
    """KEYS[i] lines are 1..n with roles of the key layout."""
    with pytest.raises(ScriptError, match="out of order"):
        header_roles("-- KEYS[2] events: x\n", "op")
    with pytest.raises(ScriptError, match="unknown key role"):
        header_roles("-- KEYS[1] elsewhere: x\n", "op")
    assert header_roles("-- x\n-- KEYS[1] events: x\n-- KEYS[2] dead: y\nlocal", "op") == (
        "events",
        "dead",
    )


# ------------------------------------------------------------ the shipped scripts

SCRIPTS = sorted(catalogue())
_CALL = re.compile(r"redis\.p?call\(\s*\"([A-Z]+)\"\s*(?:,\s*([^,)]+))?")


def test_every_operation_of_the_pure_layer_has_its_script():
    """Every script ops.py calls exists, and every script is called."""
    source = Path(ops.__file__).read_text()
    called = set(re.findall(r'ctx\.(?:call|bucketed|keyed)\(\s*"([a-z_]+)"', source))
    assert called == set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_header_follows_the_grammar(name):
    """Purpose line, KEYS with roles and patterns, ARGV, Returns and Errors."""
    text = (lua_root() / f"{name}.lua").read_text()
    header = text.split("\n\n", 1)[0]
    assert re.match(rf"-- {name}: \S.*\.\n--\n-- ", header), header
    for i, role in enumerate(load(lua_root(), name).roles, 1):
        assert f"-- KEYS[{i}] {role}: agentplane:{{<tenant>}}:{ROLES[role]}" in header
    assert "\n-- Returns: " in header
    assert "\n-- Errors: " in header


@pytest.mark.parametrize("name", SCRIPTS)
def test_keys_are_bound_once_by_role_in_header_order(name):
    """The loader binds KEYS[i] to exactly the header's roles, in order; files never do."""
    assert "= KEYS[" not in (lua_root() / f"{name}.lua").read_text()
    script = load(lua_root(), name)
    bound = re.findall(r"^  ([a-z_]+) = KEYS\[(\d+)\],$", script.source, re.M)
    assert [(r, str(i)) for i, r in enumerate(script.roles, 1)] == bound
    # header + binding; disarm_many, arm and election_heads also read the further
    # bucket keys their headers name
    further = {"disarm_many": 1, "arm": 2, "election_heads": 1}.get(name, 0)
    assert script.source.count("KEYS[") == len(script.roles) * 2 + further


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_key_a_script_touches_comes_from_keys(name):
    """Lint: each redis.call names its key as K.<role>, a role the script declares."""
    script = load(lua_root(), name)
    for line in script.source.splitlines():
        if line.lstrip().startswith("--"):
            continue
        for command, key in _CALL.findall(line):
            if command == "TIME":
                continue
            # A helper receives its key as a parameter named "key", holding a K.<role>;
            # a key bucket is one of the call's keys after its roles, named "bucket"
            # (buckets.lua, key_bucket); a time bucket family names the roles of
            # its counts and its index (buckets.lua, TIME.family).
            assert re.fullmatch(
                r"K\.[a-z_]+|key|bucket|counts|index|K\[self\.(counts|index)\]", key.strip()
            ), (name, line)
    used = set(re.findall(r"\bK\.([a-z_]+)", script.source)) - {"roles"}  # their count
    for family in re.findall(r'TIME\.family\("([a-z_]+)", "([a-z_]+)"', script.source):
        used |= set(family)
    for role in used - set(script.roles):
        # A helper for another script may name a role this one never passes; it
        # must then be unreachable here, which the behaviour battery exercises.
        assert role in ROLES, (name, role)


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_use_only_the_allowed_runtime(name):
    """No cjson, cmsgpack, bit, struct, setresp, sha1hex, set_repl, shebang or tostring."""
    source = load(lua_root(), name).source
    code = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("--"))
    for banned in (
        "cjson",
        "cmsgpack",
        "bit.",
        "struct.",
        "redis.setresp",
        "redis.sha1hex",
        "redis.set_repl",
        "tostring",
        "loadstring",
        "#!lua",
        "pairs(",
    ):
        if banned == "pairs(":
            assert re.search(r"(?<!i)pairs\(", code) is None, name
        else:
            assert banned not in code, (name, banned)


def test_scripts_are_static_files_with_stable_hashes():
    """Loading twice yields identical sources (no runtime generation)."""
    first = {n: s.source for n, s in catalogue().items()}
    again = {n: load(lua_root(), n).source for n in first}
    assert first == again


# ------------------------------------------------------------ loading on a server


def test_noscript_after_a_flush_is_handled(store, raw):
    """After SCRIPT FLUSH the next call loads the script and succeeds."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    raw.script_flush()
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"
    assert store.events.buffer(ev("e2", "k/1"), at=at(2))


def test_lua_and_python_encode_members_alike(store, raw):
    """The members Lua writes are those keys.py documents, NULs and negative instants included."""
    for n, (source, id_) in enumerate((("s", "i"), ("a\x00b", "\x00"), ("ü", "\x00\x01ÿ"))):
        store.events.buffer(ev(id_, "k/1", source=source), at=T0 - timedelta(milliseconds=n))
        ms = (T0 - timedelta(milliseconds=n) - EPOCH) // timedelta(milliseconds=1)
        assert raw.hexists(store.keys.key("events"), event_id(source, id_))
        at_ = instant_member(ms)
        start = raw.zrevrangebylex(store.keys.key("live_index"), b"[" + at_, b"-", 0, 1)[0]
        score = raw.zscore(store.keys.live_bucket(start.decode()), event_id(source, id_))
        assert score == int(at_) - int(start)


def test_the_key_guard_catches_an_undeclared_key():
    """The fakeredis key guard refuses a command on a key not passed in KEYS."""
    import fakeredis

    client = fakeredis.FakeRedis()
    with pytest.raises(Exception, match="undeclared key"):
        client.eval(PRELUDE + 'return redis.call("GET", "elsewhere")', 1, "mine")
    assert client.eval(PRELUDE + "return redis.call('SET', KEYS[1], 1)", 1, "mine") == b"OK"


def test_long_lists_go_to_variadic_commands_in_chunks(raw):
    """Lists longer than Lua can unpack at once (listings with a large limit) still work."""
    codec = expand(lua_root(), "_lib/codec.lua")
    n = 9000
    raw.hset("{t}h", mapping={f"f{i}": i for i in range(n)})
    got = raw.eval(
        codec
        + """
        local fields, members = {}, {}
        for i = 1, tonumber(ARGV[1]) do
          fields[i] = "f" .. (i - 1)
          members[i] = "m" .. i
        end
        zadd_all(KEYS[2], members)
        local added = redis.call("ZCARD", KEYS[2])
        local values = hmget_all(KEYS[1], fields)
        zrem_all(KEYS[2], members)
        return { #values, values[1], values[#values], added, redis.call("ZCARD", KEYS[2]) }
    """,
        2,
        "{t}h",
        "{t}z",
        n,
    )
    assert got == [n, b"0", str(n - 1).encode(), n, 0]


def test_helpers_a_script_never_reaches_are_dropped():
    """Kept: what the script's own lines call, and what those call in turn."""
    text = "\n".join(
        [
            "-- s: test.",
            "",
            "local LIMIT = 3",
            "local function leaf(x)",
            "  return x + LIMIT",
            "end",
            "local function unused(x)",
            "  return leaf(x)",
            "end",
            "local function used(x)",
            "  -- a comment",
            "  return leaf(x) * 2",
            "end",
            "return used(1)",
        ]
    )
    kept = prune(text, "s")
    assert "local function used(" in kept
    assert "local function leaf(" in kept
    assert "unused" not in kept
    assert "local LIMIT = 3" in kept


def test_a_helper_written_otherwise_is_refused():
    with pytest.raises(ScriptError, match="bad"):
        prune("local function bad(x)\nreturn x\nend\nreturn bad(1)\n", "s")
    with pytest.raises(ScriptError, match="open"):
        prune("local function open(x)\n  return x\n", "s")


def test_every_shipped_script_keeps_only_helpers_it_reaches():
    """Pruning never drops a function a script calls: each kept script still names
    every helper it calls (a dropped one would be a nil global at run time, which
    the battery would catch too); and the event scripts shrank."""
    for name, script in catalogue().items():
        defined = set(re.findall(r"^local function (\w+)\(", script.source, re.M))
        full = expand(lua_root(), f"{name}.lua")
        for fn in set(re.findall(r"^local function (\w+)\(", full, re.M)) - defined:
            assert not re.search(rf"\b{fn}\(", script.source), (name, fn)
    assert len(catalogue()["deliver"].source) < len(expand(lua_root(), "deliver.lua"))
