"""durability="acknowledged" on real servers (contract 7.4)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from agentplane_redis import AsyncRedisStore, DurabilityNotConfirmed, RedisStore
from agentplane_redis.server import Ladder

from helpers import at, ev, sub, timer

pytestmark = pytest.mark.real


def calls(client: Any, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_acknowledged_writes_wait_for_the_aof_and_reads_never_wait(start):
    """With AOF on, each write is confirmed by WAITAOF on its connection; reads send none."""
    server = start("valkey", appendonly=True)
    client = redis.Redis.from_url(server.url)
    store = RedisStore(client, tenant="acme", durability="acknowledged")
    before = calls(client, "waitaof")
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"
    assert calls(client, "waitaof") == before + 2
    store.events.stats()
    store.events.dead_letters()
    store.timers.pending()
    assert calls(client, "waitaof") == before + 2


def test_acknowledged_async_confirms_too(start):
    """The async store probes on first write and confirms each write."""
    server = start("valkey", appendonly=True)
    client = redis.Redis.from_url(server.url)

    async def scenario() -> None:
        store = AsyncRedisStore.from_url(server.url, tenant="acme", durability="acknowledged")
        assert await store.events.buffer(ev("e1", "k/1"), at=at(0))
        assert await store.events.deliver(ev("e2", "k/1"), at=at(0))
        await store.close_connection()

    before = calls(client, "waitaof")
    asyncio.run(scenario())
    assert calls(client, "waitaof") == before + 2


def test_without_aof_or_replicas_acknowledged_refuses_to_start(start):
    """Nothing could confirm a write: DurabilityNotConfirmed at construction (or first write)."""
    server = start("valkey")
    with pytest.raises(DurabilityNotConfirmed):
        RedisStore.from_url(server.url, durability="acknowledged")

    async def first_write() -> None:
        store = AsyncRedisStore.from_url(server.url, durability="acknowledged")
        try:
            await store.events.buffer(ev("e1"), at=at(0))
        finally:
            await store.close_connection()

    with pytest.raises(DurabilityNotConfirmed):
        asyncio.run(first_write())
    assert redis.Redis.from_url(server.url).dbsize() == 0


def test_redis_70_without_a_replica_refuses_acknowledged(start):
    """Redis 7.0 has no WAITAOF: acknowledged needs a replica for WAIT, else refuses."""
    server = start("redis", appendonly=True)
    version = redis.Redis.from_url(server.url).info()["redis_version"]
    if tuple(int(x) for x in version.split(".")[:2]) >= (7, 2):
        pytest.skip(f"redis {version} has WAITAOF")
    with pytest.raises(DurabilityNotConfirmed, match="WAIT"):
        RedisStore.from_url(server.url, durability="acknowledged")


def test_redis_70_with_a_replica_confirms_with_wait(start):
    """With one replica attached, each write is confirmed by WAIT 1."""
    primary = start("redis", extra=("--repl-diskless-sync-delay", "0"))
    replica = start("redis", extra=("--replicaof", "127.0.0.1", str(primary.port)))
    client = redis.Redis.from_url(primary.url)
    deadline = time.monotonic() + 30
    while client.info("replication").get("slave0", {}).get("state") != "online":
        assert time.monotonic() < deadline, "the replica did not come online"
        time.sleep(0.05)
    store = RedisStore(client, tenant="acme", durability="acknowledged")
    before = calls(client, "wait") + calls(client, "waitaof")
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert calls(client, "wait") + calls(client, "waitaof") == before + 1
    replica_client = redis.Redis.from_url(replica.url)
    assert replica_client.hlen(store.keys.key("events")) == 1


@pytest.mark.parametrize("functions", [True, False])
def test_acknowledged_pipelines_load_scripts_after_a_flush(start, functions):
    """A pipeline whose call finds no function (or no script) loads it and is sent again."""
    server = start("valkey", appendonly=True)
    client = redis.Redis.from_url(server.url)
    store = RedisStore(client, tenant="acme", durability="acknowledged", functions=functions)
    client.script_flush()
    client.function_flush()
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"


def test_an_acknowledged_write_whose_library_is_flushed_again_sends_its_script(start, monkeypatch):
    """The library flushed again as soon as the pipeline loaded it: the last try sends
    the script's source, which cannot miss, and the write is confirmed once."""
    server = start("valkey", appendonly=True)
    client = redis.Redis.from_url(server.url)
    store = RedisStore(client, tenant="acme", durability="acknowledged")
    real = Ladder.verify

    def verify_then_flushed(self: Ladder, where: str, again: bool = True) -> Any:
        done = yield from real(self, where, again)
        client.function_flush()
        return done

    monkeypatch.setattr(Ladder, "verify", verify_then_flushed)
    client.function_flush()
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert not store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert client.hlen(store.keys.key("events")) == 1


@pytest.mark.parametrize("kind", ["valkey", "redis"])
def test_a_server_restart_empties_the_script_cache_and_calls_go_on(start, kind):
    """After a restart (AOF on) the data is back and the next call reloads its script."""
    server = start(kind, appendonly=True, extra=("--appendfsync", "always"))
    store = RedisStore.from_url(server.url, tenant="acme")
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.timers.arm(timer("r", "t", 0))
    server.restart()
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"
    assert [t.effect for t in store.timers.claim_due(now=at(0))] == ["t"]
