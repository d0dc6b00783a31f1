"""The Functions library: built from the scripts, loaded where it is missing, versioned
so that two releases run side by side, and the scripts as the fallback."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import redis

from agentplane_redis import acl, drivers
from agentplane_redis.scripts import (
    ScriptError,
    build_library,
    catalogue,
    library,
    load,
    lua_root,
)
from agentplane_redis.server import Ladder

from helpers import at, ev, sub, timer
from keyguard import guarded_library


def life(store: Any, n: int = 0) -> None:
    """An event's and a timer's life on the store."""
    assert store.events.buffer(ev(f"e{n}", f"k/{n}"), at=at(n))
    assert store.events.wait(sub(f"r{n}", "w", f"k/{n}"), at=at(n + 1)).event.id == f"e{n}"
    store.timers.arm(timer(f"r{n}", "t", n))
    assert [t.effect for t in store.timers.claim_due(now=at(n), limit=1)] == ["t"]
    store.timers.disarm(f"r{n}", "t")


def loaded(raw: Any) -> list[str]:
    return acl.libraries(raw)


# ------------------------------------------------------------ building it


def test_every_operation_has_a_function_named_with_the_version():
    """One function per script, named agentplane_<version>_<operation>; the version is
    the source's digest, so the same files always build the same library."""
    lib = library()
    assert set(lib.functions) == set(catalogue())
    assert lib.name == f"agentplane_{lib.version}"
    for name, function in lib.functions.items():
        assert function == f"{lib.name}_{name}"
        assert f"function_name = '{function}'" in lib.source
    assert build_library(lua_root(), catalogue()) == lib
    assert lib.source.startswith(f"#!lua name={lib.name}\n")


def test_reading_operations_are_flagged_no_writes():
    """A script without a call token is declared no-writes; a writing one is not."""
    lib = library()
    for name, script in catalogue().items():
        line = next(x for x in lib.source.splitlines() if f"'{lib.functions[name]}'" in x)
        assert ('"no-writes"' in line) is (not script.writes), name


def test_a_changed_script_is_a_new_version(tmp_path):
    """Two releases' libraries differ in name and in every function's name."""
    root = tmp_path / "lua"
    shutil.copytree(lua_root(), root)
    arm = root / "arm.lua"
    arm.write_text(arm.read_text().replace("first arming wins", "the first arming wins"))
    scripts = {name: load(root, name) for name in catalogue()}
    other = build_library(root, scripts)
    assert other.version != library().version
    assert not set(other.functions.values()) & set(library().functions.values())


def test_helpers_in_contradictory_orders_are_refused(tmp_path):
    root = tmp_path
    (root / "_lib").mkdir()
    (root / "_lib/a.lua").write_text("local A = 1\n")
    (root / "_lib/b.lua").write_text("local B = 2\n")
    (root / "x.lua").write_text("-- x\n\n--@include _lib/a.lua\n--@include _lib/b.lua\nreturn 1\n")
    (root / "y.lua").write_text("-- y\n\n--@include _lib/b.lua\n--@include _lib/a.lua\nreturn 1\n")
    scripts = {name: load(root, name) for name in ("x", "y")}
    with pytest.raises(ScriptError, match="contradictory"):
        build_library(root, scripts)


def test_the_key_guard_catches_an_undeclared_key_in_the_library(tmp_path):
    """On fakeredis the library's calls go through the key guard as the scripts do."""
    import fakeredis

    root = tmp_path / "lua"
    shutil.copytree(lua_root(), root)
    (root / "stray.lua").write_text(
        "-- stray: touches a key it was not given\n--\n-- KEYS[1] events: the events\n\n"
        'return redis.call("GET", "elsewhere")\n'
    )
    scripts = {p.stem: load(root, p.stem) for p in sorted(root.glob("*.lua"))}
    lib = guarded_library(scripts, root)
    client = fakeredis.FakeRedis()
    client.function_load(lib.source)
    with pytest.raises(redis.ResponseError, match="undeclared key"):
        client.fcall(lib.functions["stray"], 1, "mine")


# ------------------------------------------------------------ on a server


def test_the_store_calls_the_library_and_loads_it_where_missing(store, raw, backend):
    """The first call on a server without the library loads it; the calls are FCALLs."""
    for name in loaded(raw):
        acl.delete_library(raw, name)
    life(store, 0)
    lib = store._driver.library
    assert lib is not None
    assert loaded(raw) == [lib.name]


def test_a_function_flush_between_calls_is_handled(store, raw):
    """After FUNCTION FLUSH the next call loads the library again and succeeds."""
    life(store, 0)
    raw.function_flush()
    life(store, 1)
    assert store._driver.library is not None


def test_a_library_flushed_again_as_soon_as_loaded_still_serves_the_call(store, raw, monkeypatch):
    """A FUNCTION FLUSH between the driver's load and its call again (another client
    flushing over and over): the call is sent as its script, which cannot miss, and
    the next call loads the library again."""
    real = Ladder.verify

    def verify_then_flushed(self: Ladder, where: str, again: bool = True) -> Any:
        done = yield from real(self, where, again)
        raw.function_flush()
        raw.script_flush()
        return done

    monkeypatch.setattr(Ladder, "verify", verify_then_flushed)
    raw.function_flush()
    life(store, 0)
    monkeypatch.setattr(Ladder, "verify", real)
    raw.function_flush()
    life(store, 1)
    assert store._driver.library is not None
    assert loaded(raw) == [store._driver.library.name]


def test_functions_false_sends_scripts(make, raw):
    """With functions=False the store sends scripts: nothing is loaded as a library."""
    raw.function_flush()
    store = make(functions=False)
    life(store, 0)
    raw.script_flush()
    life(store, 1)
    assert loaded(raw) == []


def test_functions_must_be_a_bool(make):
    with pytest.raises(Exception, match="functions must be True or False"):
        make(functions="yes")


def test_two_releases_share_a_tenant_side_by_side(make, raw, tmp_path, monkeypatch):
    """During a rolling upgrade an old and a new library serve the same tenant's data:
    each store calls its own, and each sees what the other wrote."""
    root = tmp_path / "lua"
    shutil.copytree(lua_root(), root)
    (root / "stats.lua").write_text((root / "stats.lua").read_text() + "-- next release\n")
    old = make()
    monkeypatch.setattr(drivers, "library", lambda: build_library(root, catalogue()))
    new = make()
    assert old._driver.library.name != new._driver.library.name
    assert old.events.buffer(ev("e1", "k/1"), at=at(0))
    assert new.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"
    new.timers.arm(timer("r", "t", 0))
    assert [t.effect for t in old.timers.claim_due(now=at(0))] == ["t"]
    names = loaded(raw)
    assert old._driver.library.name in names
    assert new._driver.library.name in names


def test_a_broken_library_is_raised_not_hidden(make, raw, monkeypatch):
    """A library the server refuses to compile is a packaging error: it is raised."""
    raw.function_flush()
    broken = library().__class__(
        name="agentplane_broken",
        version="broken",
        source="#!lua name=agentplane_broken\nthis is not lua\n",
        functions={name: f"agentplane_broken_{name}" for name in catalogue()},
    )
    monkeypatch.setattr(drivers, "library", lambda: broken)
    with pytest.raises(redis.ResponseError):  # at start-up (sync) or at the first call
        make().events.stats()


# ------------------------------------------------------------ who may load it


@pytest.mark.real
def test_the_cli_loads_lists_and_deletes_libraries(start, tmp_path, monkeypatch):
    """agentplane-redis library loads this release's library and, asked, deletes the
    others."""
    from click.testing import CliRunner

    from agentplane_redis import cli

    server = start("valkey")
    admin = redis.Redis(port=server.port)
    root = tmp_path / "lua"
    shutil.copytree(lua_root(), root)
    (root / "stats.lua").write_text((root / "stats.lua").read_text() + "-- older release\n")
    older = build_library(root, catalogue())
    admin.function_load(older.source)
    runner = CliRunner()
    out = runner.invoke(cli.main, ["--url", server.url, "--json", "library"])
    assert out.exit_code == 0, out.output
    assert '"others": ["' + older.name in out.output
    assert sorted(loaded(admin)) == sorted([library().name, older.name])
    # Deleting asks first; no, and nothing is deleted.
    out = runner.invoke(cli.main, ["--url", server.url, "library", "--delete-others"], input="n\n")
    assert out.exit_code == 1
    assert sorted(loaded(admin)) == sorted([library().name, older.name])
    out = runner.invoke(cli.main, ["--url", server.url, "library", "--delete-others"], input="y\n")
    assert out.exit_code == 0, out.output
    assert loaded(admin) == [library().name]
    admin.function_load(older.source)
    out = runner.invoke(cli.main, ["--url", server.url, "library", "--delete-others", "--yes"])
    assert out.exit_code == 0, out.output
    assert loaded(admin) == [library().name]


@pytest.mark.parametrize("n", [1, 9000])
def test_a_write_with_more_arguments_than_lua_unpacks_at_once(store, n):
    """A writing call's arguments reach its function whole, one or thousands (close
    names every unanswered effect): long lists are copied without unpack, which Lua
    5.1 refuses past a few thousand values."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.wait(sub("r", f"w{n - 1}", "k/1"), at=at(1)).event.id == "e1"
    closed = store.runs.close("r", [f"w{i}" for i in range(n)])
    assert [e.id for e in closed.retired.released] == ["e1"]
    assert closed.retired.waits == 1


def test_a_reply_arrives_as_words_or_as_its_text_and_reads_as_its_list(store, monkeypatch):
    """A reply of one or two words (a status, an instant, a count) arrives as one status
    line, and any other reply of a writing call without a payload as the text it
    remembers for a call re-sent (test_lost_replies.py): each one string, which a
    client reads for less than an array. A reply holding a payload arrives as its
    list, since the text remembered withholds the payload. The driver reads each
    as the list it stands for."""
    driver = store._driver
    received = driver._received
    seen: list[Any] = []

    def spy(call: Any, reply: Any) -> Any:
        if not (isinstance(reply, list) and reply[0] == b"NEED"):  # a call naming buckets
            seen.append(reply)
        return received(call, reply)

    monkeypatch.setattr(driver, "_received", spy)
    assert store.events.buffer(ev("e1", "k/1"), at=at(5)) is True
    assert store.events.buffer(ev("e1", "k/1"), at=at(6)) is False
    store.events.subscribe(sub("r", "w", "k/1"), at=at(7))
    assert store.timers.disarm("r", "none") is False
    claimed = store.events.wait(sub("r", "w", "k/1"), at=at(8))
    assert claimed is not None
    assert claimed.event.id == "e1"
    t0 = int(at(0).timestamp() * 1000)
    assert seen[:4] == [b"NEW", b"SEEN", b"OK %d" % (t0 + 7), b"NONE"]
    assert isinstance(seen[4], list)
    assert seen[4][:2] == [b"HIT", b"%d" % (t0 + 8)]
