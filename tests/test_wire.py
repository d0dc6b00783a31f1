"""The wire (wire.py): calls a sync store packs itself, sent on the client's own pool
with the client's own retries, and the clients it leaves to ``execute_command``."""

from __future__ import annotations

import os
import threading
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from agentplane_redis import AsyncRedisStore, RedisStore
from agentplane_redis.wire import KEEP_FROM, AsyncWire, Wire, async_wire_for, pack, wire_for

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


# ---------------------------------------------------------------- the kept connection


def _single_server(backend: Any) -> None:
    if backend.flavour != "sync" or backend.cluster or backend.name == "fake":
        pytest.skip("a single real server's sync client")


def test_a_kept_connection_killed_between_calls_is_replaced_unseen(backend):
    """CLIENT KILL of the kept connection between two calls: the next call is sent on
    a new connection, so even a client that never retries sees no error."""
    _single_server(backend)
    client = backend.sync_client(retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, tenant=backend.tenant)
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert len(store._driver._wire._kept.idle) == 1
    backend.raw.client_kill_filter(_type="normal", skipme=True)
    assert store.events.buffer(ev("e2", "k/1"), at=at(1))
    assert store.events.stats().live == 2
    client.close()


def test_a_closed_client_reconnects_on_its_next_call(backend):
    _single_server(backend)
    client = backend.sync_client()
    store = RedisStore(client, tenant=backend.tenant)
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    client.connection_pool.disconnect()
    assert store.events.buffer(ev("e2", "k/1"), at=at(1))
    client.close()


def test_other_pools_lend_a_connection_per_call(backend):
    """A BlockingConnectionPool's connection goes back after each call: with one
    connection in the pool, the client's own commands still get it between calls."""
    _single_server(backend)
    pool = redis.BlockingConnectionPool.from_url(backend.url, max_connections=1, timeout=1)
    client = redis.Redis(connection_pool=pool)
    store = RedisStore(client, tenant=backend.tenant)
    for i in range(3):
        assert store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))
        assert client.ping()
    assert store._driver._wire._kept is None
    client.close()


def test_threads_share_a_store_and_keep_at_most_one_connection(backend):
    """Eight threads call one store at once: every call answers its own, and between
    calls the wire keeps one connection (the others go back to the pool)."""
    _single_server(backend)
    client = backend.sync_client()
    store = RedisStore(client, tenant=backend.tenant)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(100):
                assert store.events.buffer(ev(f"e{t}-{i}", "k/1"), at=at(i))
                assert not store.events.buffer(ev(f"e{t}-{i}", "k/1"), at=at(i))
        except BaseException as error:  # pragma: no cover - the assertion below shows it
            errors.append(error)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.events.stats().live == 800
    assert len(store._driver._wire._kept.idle) <= 1
    client.close()


def test_stores_on_one_client_keep_one_connection_between_them(backend):
    """Two hundred short-lived stores on one client: the pool keeps one connection
    for them all, never one per store."""
    _single_server(backend)
    client = backend.sync_client()
    for i in range(200):
        store = RedisStore(client, tenant=f"{backend.tenant}-{i}")
        assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert len(client.client_list()) <= 3  # the kept one, client_list's own, the test's
    client.close()


def test_a_small_pool_lends_per_call(backend):
    """A pool of fewer than KEEP_FROM connections keeps none."""
    _single_server(backend)
    client = redis.Redis.from_url(backend.url, max_connections=KEEP_FROM - 1)
    store = RedisStore(client, tenant=backend.tenant)
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store._driver._wire._kept is None
    client.close()


def test_a_forked_process_uses_a_connection_of_its_own(backend):
    """After fork, parent and child call the same store at once, the child buffering
    events stored before (each a duplicate) and the parent new ones: each gets its
    own replies, which a shared socket would mix."""
    _single_server(backend)
    client = backend.sync_client(socket_timeout=5, retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, tenant=backend.tenant)
    for i in range(200):
        assert store.events.buffer(ev(f"c{i}", "k/1"), at=at(i))
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            for i in range(200):
                if store.events.buffer(ev(f"c{i}", "k/1"), at=at(i)):
                    code = 1
        except BaseException:
            code = 2
        os._exit(code)
    answers = [store.events.buffer(ev(f"p{i}", "k/1"), at=at(i)) for i in range(200)]
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert all(answers)
    assert store.events.stats().live == 400
    client.close()
