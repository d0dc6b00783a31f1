"""Server errors keep their class, and a server that would lose data is refused
(contract 7.4, 9.3)."""

from __future__ import annotations

import asyncio
import json
import time

import fakeredis
import pytest
import redis
import redis.asyncio
from click.testing import CliRunner

from agentplane_redis import (
    AsyncRedisStore,
    CorruptRow,
    DurabilityNotConfirmed,
    InvalidInput,
    RedisStore,
    ServerMisconfigured,
)
from agentplane_redis.cli import EXIT_SERVER, EXIT_UNREACHABLE, main
from agentplane_redis.drivers import plan_confirmation
from agentplane_redis.keys import event_id, pack_event_row, unpack_event_row
from agentplane_redis.scripts import library

from conftest import Blocking
from helpers import at, ev, sub, timer


@pytest.mark.real
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_out_of_memory_inside_a_script_is_out_of_memory_error(start, kind):
    """OOM raised at a write inside a script reaches the caller as OutOfMemoryError."""
    server = start(kind)
    store = RedisStore.from_url(server.url, tenant="acme")
    store.events.buffer(ev("e0", "k/1"), at=at(0))
    redis.Redis.from_url(server.url).config_set("maxmemory", 1)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        store.events.buffer(ev("e1", "k/1"), at=at(0))
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        store.timers.claim_due()


@pytest.mark.real
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_a_full_server_is_freed_through_the_store(start, kind, flavour):
    """With noeviction at maxmemory every write that adds is refused, but the operations
    whose net effect frees memory run (contract 7.2): purge, sweep_unclaimed,
    unsubscribe, unsubscribe_run, erase_payload, disarm, disarm_run, close and
    parked_waits; after them the store writes again."""
    server = start(kind)
    admin = redis.Redis.from_url(server.url)
    loop = asyncio.new_event_loop() if flavour == "async" else None
    if loop is None:
        store = RedisStore.from_url(server.url, tenant="acme")
    else:
        store = Blocking(AsyncRedisStore.from_url(server.url, tenant="acme"), loop)
    ev_, tm, rn = store.events, store.timers, store.runs
    for run in ("r1", "r2"):
        for effect in ("t1", "t2"):
            tm.arm(timer(run, effect, 0))
    for n, run in enumerate(("r3", "r4", "r5")):
        ev_.buffer(ev(f"held{n}", f"k/{run}"), at=at(0))
        assert ev_.wait(sub(run, "w", f"k/{run}"), at=at(1)) is not None
    ev_.park_wait(sub("r6", "w", "k/r6"), at=at(1))
    rn.seal("r6")
    ev_.buffer(ev("secret", "k/x", payload={"card": "4242"}), at=at(0))
    filler = "x" * 8000
    for i in range(300):
        ev_.buffer(ev(f"f{i}", "k/f", payload={"pad": filler}), at=at(0))
    admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) - 100_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        ev_.buffer(ev("refused", "k/1"), at=at(2))
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        tm.arm(timer("r9", "t", 0))
    assert ev_.erase_payload("src", "secret") is True
    ev_.unsubscribe("r3", "w")
    assert ev_.unsubscribe_run("r4", ["w"]).waits == 1
    assert rn.close("r5").timers == 0
    assert tm.disarm("r1", "t1") is True
    assert tm.disarm_run("r2") == 2
    assert ev_.parked_waits() == []
    assert ev_.sweep_unclaimed(at(10)) >= 300  # the fillers, dead-lettered
    assert ev_.purge(at(10)) >= 300
    assert ev_.buffer(ev("after", "k/1"), at=at(20)) is True  # memory is free again
    if loop is not None:
        loop.run_until_complete(store._target.close_connection())
        loop.close()


@pytest.mark.real
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_a_write_to_a_replica_is_read_only_error(start, kind):
    """A store pointed at a replica gets ReadOnlyError for writes; reads work."""
    primary = start(kind)
    replica = start(kind, extra=("--replicaof", "127.0.0.1", str(primary.port)))
    store = RedisStore.from_url(replica.url, tenant="acme")
    with pytest.raises(redis.exceptions.ReadOnlyError):
        store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.stats().live == 0


@pytest.mark.real
def test_a_confirmation_the_server_refuses_is_durability_not_confirmed(start):
    """appendonly switched off after start-up: WAITAOF is refused, DurabilityNotConfirmed."""
    server = start("valkey", appendonly=True)
    store = RedisStore.from_url(server.url, tenant="acme", durability="acknowledged")
    assert store.events.buffer(ev("e0", "k/1"), at=at(0))
    redis.Redis.from_url(server.url).config_set("appendonly", "no")
    with pytest.raises(DurabilityNotConfirmed):
        store.events.buffer(ev("e1", "k/1"), at=at(0))


@pytest.mark.real
@pytest.mark.parametrize("functions", [True, False])
def test_a_script_flush_between_pipelines_is_handled(start, functions):
    """A flush after a function or script was loaded: the pipeline that finds it missing
    is sent again, not raised."""
    server = start("valkey", appendonly=True)
    client = redis.Redis.from_url(server.url)
    store = RedisStore(client, tenant="acme", durability="acknowledged", functions=functions)
    assert store.events.buffer(ev("e0", "k/1"), at=at(0))
    client.script_flush()
    client.function_flush()
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e0"


@pytest.mark.real
@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_evicting_server_is_refused(start, policy):
    """allkeys-* eviction would delete rows: refused at construction and by check()."""
    server = start("valkey", extra=("--maxmemory-policy", policy))
    with pytest.raises(ServerMisconfigured, match=policy):
        RedisStore.from_url(server.url)
    with pytest.raises(ServerMisconfigured):
        asyncio.run(AsyncRedisStore.connect(server.url))


@pytest.mark.real
def test_volatile_policies_are_safe_and_a_later_change_is_caught_by_check(start):
    """volatile-* never touches keys without TTL (the store sets none); check() re-reads."""
    server = start("redis", extra=("--maxmemory-policy", "volatile-lru"))
    store = RedisStore.from_url(server.url)
    assert store.check().eviction_policy == "volatile-lru"
    redis.Redis.from_url(server.url).config_set("maxmemory-policy", "allkeys-lru")
    with pytest.raises(ServerMisconfigured):
        store.check()


@pytest.mark.real
def test_a_replica_in_its_initial_sync_does_not_count(start):
    """Redis 7.0 confirms with WAIT: a replica not yet online cannot, so refuse."""
    primary = start(
        "redis", extra=("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "30")
    )
    start("redis", extra=("--replicaof", "127.0.0.1", str(primary.port)))
    client = redis.Redis.from_url(primary.url)
    deadline = time.monotonic() + 10
    while int(client.info("replication")["connected_slaves"]) == 0:
        assert time.monotonic() < deadline, "the replica never connected"
        time.sleep(0.05)
    version = client.info()["redis_version"]
    if tuple(int(x) for x in version.split(".")[:2]) >= (7, 2):
        pytest.skip(f"redis {version} confirms with WAITAOF")
    with pytest.raises(DurabilityNotConfirmed, match="initial sync"):
        RedisStore(client, durability="acknowledged")


def test_only_online_replicas_count_in_the_plan():
    """The confirmation asks only for replicas past their initial sync."""
    info = {
        "redis_version": "7.2.4",
        "aof_enabled": 1,
        "connected_slaves": 2,
        "slave0": {"state": "online"},
        "slave1": {"state": "wait_bgsave"},
    }
    assert plan_confirmation(info).replicas == 1


@pytest.mark.real
def test_the_async_store_refuses_acknowledged_at_connect(start):
    """AsyncRedisStore.connect checks before returning, as the sync constructor does."""
    server = start("valkey")
    with pytest.raises(DurabilityNotConfirmed):
        asyncio.run(AsyncRedisStore.connect(server.url, durability="acknowledged"))


def test_stores_refuse_a_client_of_the_other_flavour():
    """An async store over a sync client (or the reverse) is refused at construction."""
    with pytest.raises(InvalidInput, match="asyncio"):
        AsyncRedisStore(fakeredis.FakeRedis())
    with pytest.raises(InvalidInput, match="synchronous"):
        RedisStore(fakeredis.FakeAsyncRedis())


def test_bytes_that_are_not_utf8_are_corrupt_for_decoding_clients_too(backend):
    """A tampered row read through a decode_responses=True client is CorruptRow, named."""
    store = RedisStore(backend.sync_client(decode_responses=True), tenant="acme")
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.sweep_unclaimed(at(0))
    key, field = store.keys.key("events"), event_id("src", "e1")
    fields = unpack_event_row(backend.raw.hget(key, field))
    fields[7] = b"\xff\xfe kind"
    backend.raw.hset(key, field, pack_event_row(fields))
    with pytest.raises(CorruptRow, match="e1"):
        store.events.dead_letters()
    with pytest.raises(CorruptRow):
        store.events.minter("src", "e1")


@pytest.mark.real
def test_the_check_command_reports_and_refuses(start):
    """agentplane-redis check: the findings (--json pinned), and exit 5 with one line for
    an evicting server, 4 for an unreachable one."""
    good = start("valkey", appendonly=True)
    result = CliRunner().invoke(main, ["--url", good.url, "--json", "check"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    fields = {"server", "eviction_policy", "appendonly", "online_replicas", "node", "library"}
    assert set(found) == fields | {"persistence", "verdict"}
    assert (found["persistence"], found["verdict"]) == ("aof", "ok")
    assert found["server"].startswith("valkey ")
    assert found["library"] == library().name  # verified
    assert found["node"] is None  # not a cluster
    assert (found["eviction_policy"], found["appendonly"], found["online_replicas"]) == (
        "noeviction",
        True,
        0,
    )
    bad = start("redis", extra=("--maxmemory-policy", "allkeys-lru"))
    result = CliRunner().invoke(main, ["--url", bad.url, "check"])
    assert result.exit_code == EXIT_SERVER
    assert "allkeys-lru" in result.output
    assert len(result.output.strip().splitlines()) == 1
    down = CliRunner().invoke(main, ["--url", "redis://127.0.0.1:1/0", "check"])
    assert down.exit_code == EXIT_UNREACHABLE
    assert len(down.output.strip().splitlines()) == 1
