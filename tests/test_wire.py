"""The wire (wire.py): calls a sync store packs itself, sent on the client's own pool
with the client's own retries, and the clients it leaves to ``execute_command``."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from agentplane_redis import AsyncRedisStore, RedisStore
from agentplane_redis.wire import AsyncWire, Wire, async_wire_for, pack, wire_for

from conftest import Blocking
from helpers import at, ev, sub, timer


@pytest.mark.parametrize(
    "args",
    [
        ("FCALL", "agentplane_x_buffer", 2, "agentplane:{acme}:event", "k2", "", "tok"),
        ("EVALSHA", "ab" * 20, 0),
        ("FCALL", "f", 1, "agentplane:{é}:event", "ünï\x00\x01cödé", "😀", -12, 10**15),
        ("FCALL", "f", 0, b"raw\r\nbytes", ""),
    ],
)
def test_a_packed_call_is_what_redis_py_packs(args):
    """The bytes on the wire are the ones redis-py's own packer writes."""
    theirs = b"".join(redis.connection.Connection().pack_command(*args))
    assert pack(args) == theirs


def test_the_fixed_head_is_packed_once_and_the_rest_per_call():
    """A call's head and keys are packed the first time; later calls pack their tail."""
    sent: list[bytes] = []

    class Recorded(Wire):
        def send(self, packed: bytes) -> Any:
            sent.append(packed)

    w = Recorded(pool=None)
    head = ("FCALL", "f")
    w.call(head, (2, "k1", "k2", "tok", "a"))
    w.call(head, (2, "k1", "k2", "tok2", "b", "c"))
    assert sent == [
        pack(("FCALL", "f", 2, "k1", "k2", "tok", "a")),
        pack(("FCALL", "f", 2, "k1", "k2", "tok2", "b", "c")),
    ]
    assert list(w._prefixes) == [head]


def test_which_clients_get_a_wire():
    """A plain pooled client does, of its kind; a single-connection client and a client
    with client-side caching keep execute_command."""
    assert isinstance(wire_for(fakeredis.FakeRedis()), Wire)
    assert isinstance(async_wire_for(redis.asyncio.Redis()), AsyncWire)
    assert wire_for(fakeredis.FakeRedis(single_connection_client=True)) is None
    assert async_wire_for(redis.asyncio.Redis(single_connection_client=True)) is None
    assert wire_for(redis.asyncio.Redis()) is None
    assert async_wire_for(fakeredis.FakeRedis()) is None
    assert wire_for(object()) is None
    cached = fakeredis.FakeRedis()
    cached.connection_pool.cache = object()
    assert wire_for(cached) is None


def test_redis_py_before_6_keeps_execute_command(monkeypatch):
    monkeypatch.setattr(redis, "__version__", "5.2.1")
    assert wire_for(fakeredis.FakeRedis()) is None


def _life(store: Any) -> None:
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"
    store.timers.arm(timer("r", "t", 0))
    assert [t.effect for t in store.timers.claim_due(now=at(0), limit=1)] == ["t"]


def test_a_store_sends_its_calls_on_the_wire(backend, monkeypatch):
    """On a single server every call of a store goes through its wire; on a cluster,
    none (redis-py routes them)."""
    sent: list[bytes] = []
    kind = AsyncWire if backend.flavour == "async" else Wire
    real = kind.send

    def counted(self: Wire, packed: bytes) -> Any:
        sent.append(packed)
        return real(self, packed)

    monkeypatch.setattr(kind, "send", counted)
    store = backend.make(backend.tenant)
    _life(store)
    if backend.cluster:
        assert store._driver._wire is None
        assert sent == []
    else:
        assert len(sent) >= 4  # buffer, wait, arm, claim_due
        assert all(p.startswith(b"*") and b"$5\r\nFCALL\r\n" in p for p in sent)


def test_a_single_connection_client_is_served_by_execute_command(backend):
    """A store on a single-connection client sends through execute_command, and works."""
    if backend.cluster:
        pytest.skip("a single server's client")
    if backend.flavour == "sync":
        client = backend.sync_client(single_connection_client=True)
        store = RedisStore(client, tenant=backend.tenant)
        assert store._driver._wire is None
        _life(store)
        client.close()
        return
    client = backend.async_client(single_connection_client=True)
    astore = AsyncRedisStore(client, tenant=backend.tenant)
    assert astore._driver._wire is None
    _life(Blocking(astore, backend.loop))
    backend.loop.run_until_complete(client.aclose())
