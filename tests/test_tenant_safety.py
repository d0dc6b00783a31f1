"""One tenant cannot hurt the server or another tenant (contract 7.1, "a tenant runs
only the store's code"): its ACL user runs no code of its own choosing, reads no
server-wide state, and its store runs only the library this release ships."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis
import redis.asyncio
from click.testing import CliRunner
from test_acl import exercise

from agentplane_redis import (
    AsyncRedisStore,
    LibraryMismatch,
    LibraryMissing,
    RedisStore,
    acl,
    server,
)
from agentplane_redis.cli import EXIT_SERVER, main
from agentplane_redis.keys import TenantKeys
from agentplane_redis.scripts import catalogue, library

from conftest import CLUSTER_TENANTS
from helpers import at, ev

KINDS = ["redis", "valkey"]


def refused(client: Any, *command: Any) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*command)


def attempts(other: TenantKeys) -> list[tuple[Any, ...]]:
    """Everything a tenant's user must not do: run code of its choosing, replace or
    drop the library, reach another tenant's keys, read or steer the server."""
    stats = library().functions["stats"]
    others = other.for_roles(catalogue()["stats"].roles)
    return [
        ("EVAL", "while true do end", 0),
        ("EVAL", "return string.rep('x', 1e8)", 0),
        ("EVAL_RO", "return 1", 0),
        ("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0),
        ("EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0),
        ("SCRIPT", "LOAD", "return 1"),
        ("SCRIPT", "FLUSH"),
        ("SCRIPT", "KILL"),
        ("FUNCTION", "LOAD", "REPLACE", library().source),
        ("FUNCTION", "DELETE", library().name),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "RESTORE", b"\x00"),
        ("FUNCTION", "KILL"),
        ("FCALL", stats, len(others), *others),
        ("KEYS", "*"),
        ("SCAN", 0),
        ("INFO",),
        ("INFO", "keyspace"),
        ("CONFIG", "GET", "*"),
        ("CONFIG", "SET", "maxmemory", "1"),
        ("DEBUG", "SLEEP", 0),
        ("MONITOR",),
        ("CLIENT", "LIST"),
        ("CLIENT", "KILL", "ID", 1),
        ("SHUTDOWN", "NOSAVE"),
        ("FLUSHALL",),
        ("ACL", "LIST"),
        ("MODULE", "LIST"),
    ]


@pytest.mark.real
@pytest.mark.parametrize("kind", KINDS)
def test_a_tenants_user_runs_only_the_stores_code(start, kind):
    """The user agentplane-redis acl creates gets NOPERM for EVAL, EVALSHA, SCRIPT,
    FUNCTION LOAD/DELETE/FLUSH/RESTORE, FCALL on another tenant's keys, KEYS, SCAN,
    INFO, CONFIG, DEBUG, MONITOR, CLIENT, SHUTDOWN, while every store operation on
    its own tenant works, sync and async."""
    srv = start(kind, extra=("--enable-debug-command", "yes"))  # DEBUG refused by the ACL
    admin = redis.Redis(port=srv.port)
    out = CliRunner().invoke(
        main, ["--url", srv.url, "--tenant", "acme", "--json", "acl", "--password", "pw"]
    )
    assert out.exit_code == 0, out.output
    client = redis.Redis(port=srv.port, username="agentplane-acme", password="pw")
    for command in attempts(TenantKeys("globex")):
        refused(client, *command)
    assert admin.ping()  # nothing stalled or stopped it
    store = RedisStore(client, tenant="acme")
    assert store.check().library == library().name
    exercise(store)

    async def run_async() -> None:
        aclient = redis.asyncio.Redis(port=srv.port, username="agentplane-acme", password="pw")
        astore = await AsyncRedisStore.connect(aclient, tenant="acme")
        assert await astore.events.buffer(ev("async", "k/1"), at=at(0))
        assert (await astore.events.stats()).live >= 1
        await astore.close_connection()

    asyncio.run(run_async())
    stats = admin.info("commandstats")
    for command in ("eval", "evalsha", "eval_ro", "evalsha_ro"):  # no script ever ran
        assert stats.get(f"cmdstat_{command}", {}).get("calls", 0) == 0, command
    assert stats["cmdstat_fcall"]["calls"] > 20


@pytest.mark.real
@pytest.mark.parametrize("kind", KINDS)
def test_on_a_cluster_a_tenants_user_runs_only_the_stores_code(start_cluster, kind):
    """The same attempts through redis-py's cluster client, on the node serving the
    tenant and on every other master: NOPERM; the tenant's own operations work."""
    cluster = start_cluster(kind, extra=("--enable-debug-command", "yes"))
    admin = redis.RedisCluster.from_url(cluster.url)
    tenant, other = CLUSTER_TENANTS[0], CLUSTER_TENANTS[1]
    acl.create_tenant_user(admin, tenant, "pw", "tenant")
    client = redis.RedisCluster.from_url(cluster.url, username="tenant", password="pw")
    for node in cluster.nodes:
        with redis.Redis(port=node.port, username="tenant", password="pw") as direct:
            for command in attempts(TenantKeys(other)):
                refused(direct, *command)
    exercise(RedisStore.from_url(cluster.url.replace("://", "://tenant:pw@"), tenant=tenant))
    client.close()
    admin.close()


def _tenant_client(srv: Any, flavour: str) -> Any:
    kind = redis.asyncio.Redis if flavour == "async" else redis.Redis
    return kind(port=srv.port, username="agentplane-acme", password="pw")


def _runner(flavour: str) -> Any:
    """How a test runs a store's call: as it is (sync), or to completion on one loop."""
    if flavour == "sync":
        return lambda result: result
    return asyncio.new_event_loop().run_until_complete


def _open(srv: Any, flavour: str, run: Any = None) -> Any:
    """A tenant store, checked at start-up (the sync constructor; connect for async)."""
    if flavour == "sync":
        return RedisStore(_tenant_client(srv, flavour), tenant="acme")
    run = run or _runner(flavour)
    return run(AsyncRedisStore.connect(_tenant_client(srv, flavour), tenant="acme"))


@pytest.mark.real
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_tenant_store_without_the_library_names_the_command_that_loads_it(start, kind, flavour):
    """A tenant's user may neither load the library nor send scripts: with the library
    gone its store refuses at start-up with LibraryMissing naming agentplane-redis
    library; once the administrator loads it, the same user's store works."""
    srv = start(kind)
    admin = redis.Redis(port=srv.port)
    acl.create_tenant_user(admin, "acme", "pw")
    admin.function_flush()
    run = _runner(flavour)
    with pytest.raises(LibraryMissing, match="agentplane-redis library"):
        _open(srv, flavour, run)
    out = CliRunner().invoke(main, ["--url", srv.url, "--json", "library"])
    assert out.exit_code == 0, out.output
    store = _open(srv, flavour, run)
    assert run(store.events.buffer(ev("e1", "k/1"), at=at(0)))


@pytest.mark.real
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_store_returns_to_its_functions_once_the_library_is_back(
    start, kind, flavour, monkeypatch, caplog
):
    """A user that may send scripts but not load Functions: after FUNCTION FLUSH its
    store warns once and sends scripts, and once the library is loaded again its
    calls are FCALLs again (not scripts for the rest of its life)."""
    monkeypatch.setattr(server, "SCRIPTS_FOR_S", 0.0)
    srv = start(kind)
    admin = redis.Redis(port=srv.port)
    rules = ["reset", "on", ">pw", "~*", "+@all", "-function|load", "-function|restore"]
    admin.execute_command("ACL", "SETUSER", "agentplane-acme", *rules)
    acl.load_library(admin)
    run = _runner(flavour)
    store = _open(srv, flavour, run)
    sent = iter(range(100))

    def calls(n: int) -> None:
        for _ in range(n):
            assert run(store.events.buffer(ev(f"e{next(sent)}", "k/1"), at=at(0))) is True

    admin.function_flush()
    with caplog.at_level(logging.WARNING, logger="agentplane_redis"):
        calls(3)
    warnings = [r for r in caplog.records if "sending scripts instead" in r.getMessage()]
    assert len(warnings) == 1
    assert "agentplane-redis library" in warnings[0].getMessage()
    assert admin.info("commandstats")["cmdstat_evalsha"]["calls"] >= 3
    acl.load_library(admin)
    before = admin.info("commandstats")["cmdstat_fcall"]["calls"]
    scripts = admin.info("commandstats")["cmdstat_evalsha"]["calls"]
    calls(3)
    assert admin.info("commandstats")["cmdstat_fcall"]["calls"] == before + 3
    assert admin.info("commandstats")["cmdstat_evalsha"]["calls"] == scripts


def tampered(lib: Any) -> str:
    """The library's code with one line more, under the same name and functions: what a
    user allowed FUNCTION LOAD could put in its place."""
    line = "local KEYS, ARGV, K, TOKEN, SEQ, GEO"
    assert line in lib.source
    return lib.source.replace(line, line + " -- and a copy of every payload")


def test_a_replaced_library_is_refused_at_start_up_and_by_check(make, raw, backend):
    """A library of this release's name whose code differs is refused with
    LibraryMismatch: by the start-up check of a new store and by check() of a running
    one, on every backend, sync and async."""
    running = make()
    running.events.stats()
    lib = running._driver.library
    for node in server.masters(raw):
        node.execute_command("FUNCTION", "LOAD", "REPLACE", tampered(lib))
    with pytest.raises(LibraryMismatch, match="not the code this release ships"):
        make().events.stats()  # sync: refused by the constructor; async: at its first call
    with pytest.raises(LibraryMismatch):
        running.check()
    for node in server.masters(raw):
        node.execute_command("FUNCTION", "LOAD", "REPLACE", lib.source)
    assert running.check().library == lib.name
    assert make().events.stats().live == 0


@pytest.mark.real
@pytest.mark.parametrize("kind", KINDS)
def test_the_library_command_replaces_a_tampered_library(start, kind):
    """agentplane-redis library finds the tampered copy, says so, and replaces it; the
    tenants' stores then run again."""
    srv = start(kind)
    admin = redis.Redis(port=srv.port)
    acl.create_tenant_user(admin, "acme", "pw")
    admin.function_load(tampered(library()), replace=True)
    assert server.verify_library(admin) == {f"localhost:{srv.port}": "mismatch"}
    with pytest.raises(LibraryMismatch):
        _open(srv, "sync")
    out = CliRunner().invoke(main, ["--url", srv.url, "library"])
    assert out.exit_code == 0, out.output
    assert "replaced" in out.output
    assert server.verify_library(admin) == {f"localhost:{srv.port}": "ok"}
    assert _open(srv, "sync").events.buffer(ev("e1", "k/1"), at=at(0))
    out = CliRunner().invoke(main, ["--url", srv.url, "--json", "library"])
    assert '"verified"' in out.output


@pytest.mark.real
def test_a_store_refuses_to_start_when_it_cannot_compare_the_library(start):
    """A user without FUNCTION LIST cannot have the library verified: LibraryMismatch
    says which grant it needs; the CLI exits with the server code."""
    srv = start("valkey")
    admin = redis.Redis(port=srv.port)
    acl.load_library(admin)
    admin.execute_command("ACL", "SETUSER", "blind", "on", ">pw", "~*", "+@all", "-function")
    client = redis.Redis(port=srv.port, username="blind", password="pw")
    with pytest.raises(LibraryMismatch, match=r"\+function\|list"):
        RedisStore(client, tenant="acme")
    url = srv.url.replace("://", "://blind:pw@")
    out = CliRunner().invoke(main, ["--url", url, "stats"])
    assert out.exit_code == EXIT_SERVER, out.output
    assert "Traceback" not in out.output
