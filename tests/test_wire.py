"""The wire (wire.py): calls a sync store packs itself, sent on the client's own pool
with the client's own retries, and the clients it leaves to ``execute_command``."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
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
        ("FCALL", "f", 0, "x" * 511, "y" * 512, "é" * 300, b"z" * 70_000),
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
        def send(self, packed: bytes, again: Any = None) -> Any:
            sent.append(packed)

    w = Recorded(pool=None)
    head = ("FCALL", "f")
    w.call(head, (2, "k1", "k2", "tok", "a"))
    w.call(head, (2, "k1", "k2", "tok2", "b", "c"))
    assert sent == [
        pack(("FCALL", "f", 2, "k1", "k2", "tok", "a")),
        pack(("FCALL", "f", 2, "k1", "k2", "tok2", "b", "c")),
    ]
    assert list(w._prefixes) == [(*head, 2, "k1", "k2")]


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
    """On a single server every call of a store goes through its wire; on a cluster
    through a wire on the store's own client of the slot's master (a try after a
    failed one goes through RedisCluster)."""
    sent: list[bytes] = []
    kind = AsyncWire if backend.flavour == "async" else Wire
    real = kind.send

    def counted(self: Wire, packed: bytes, again: Any = None) -> Any:
        sent.append(packed)
        return real(self, packed, again)

    monkeypatch.setattr(kind, "send", counted)
    store = backend.make(backend.tenant)
    _life(store)
    if backend.cluster:
        assert store._driver._wire is None
    assert len(sent) >= 4  # buffer, wait, arm, claim_due
    assert all(p.startswith(b"*") and b"$5\r\nFCALL\r\n" in p for p in sent)


class _LosesFirstReply:
    """A connection that sends whatever it is given and loses the first reply."""

    def __init__(self) -> None:
        self.retry = Retry(NoBackoff(), 3)
        self.sent: list[bytes] = []

    def send_packed_command(self, packed: list[bytes]) -> None:
        self.sent.extend(packed)

    def read_response(self, **_: Any) -> Any:
        if len(self.sent) == 1:
            raise redis.ConnectionError("reply lost")
        return b"OK"

    def disconnect(self) -> None:
        pass


class _OnePool:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def get_connection(self, *_: Any) -> Any:
        return self.conn

    def release(self, conn: Any) -> None:
        pass


def test_a_retry_sends_the_call_again_as_given():
    """The client's retry after a lost reply sends the call's ``again`` form (a
    call's first send is marked; its re-sends are not), and without one the same."""
    conn = _LosesFirstReply()
    w = Wire(_OnePool(conn))
    head = ("FCALL", "f")
    assert w.call(head, (0, "tok", "+"), again=(0, "tok", "")) == b"OK"
    assert conn.sent == [pack((*head, 0, "tok", "+")), pack((*head, 0, "tok", ""))]
    conn.sent.clear()
    assert w.call(head, (0, "tok", "")) == b"OK"
    assert conn.sent == [pack((*head, 0, "tok", ""))] * 2


def test_a_retry_of_an_async_call_sends_it_again_as_given():
    class Async(_LosesFirstReply):
        async def send_packed_command(self, packed: list[bytes]) -> None:
            super().send_packed_command(packed)

        async def read_response(self, **_: Any) -> Any:
            return super().read_response()

        async def disconnect(self) -> None:
            pass

    class Pool(_OnePool):
        async def get_connection(self, *_: Any) -> Any:
            return self.conn

        async def release(self, conn: Any) -> None:
            pass

    conn = Async()
    conn.retry = redis.asyncio.retry.Retry(NoBackoff(), 3)
    w = AsyncWire(Pool(conn))
    head = ("FCALL", "f")
    reply = asyncio.run(w.call(head, (0, "tok", "+a"), again=(0, "tok", "a")))
    assert reply == b"OK"
    assert conn.sent == [pack((*head, 0, "tok", "+a")), pack((*head, 0, "tok", "a"))]


def test_a_writing_call_is_sent_first_marked_and_again_unmarked(backend, monkeypatch):
    """On the wire a writing call's first send marks its number on its lane, its last
    argument (the script then looks up no remembered reply); its re-send, unmarked,
    answers the first execution's reply. A reading call carries no mark."""
    sends: list[tuple[bytes, bytes | None]] = []
    kind = AsyncWire if backend.flavour == "async" else Wire
    real = kind.send

    def recorded(self: Wire, packed: bytes, again: Any = None) -> Any:
        sends.append((packed, again() if again else None))
        return real(self, packed, again)

    monkeypatch.setattr(kind, "send", recorded)
    store = backend.make(backend.tenant)
    store.timers.arm(timer("r", "t", 0))
    assert store.timers.pending_count() == 1
    (first, again), (read, none) = sends[-2:]
    assert again is not None
    head, _, number = again.rstrip(b"\r\n").rpartition(b"\r\n")
    assert number.isdigit()
    assert first == head[: head.rindex(b"$")] + b"$%d\r\n+%s\r\n" % (len(number) + 1, number)
    assert none is None
    assert b"+" not in read.rstrip(b"\r\n").rpartition(b"\r\n")[2]


def test_a_lane_carries_one_call_at_a_time_and_a_forked_child_draws_its_own():
    """A store's writing calls take lanes: a lane given back is taken again, with a
    later number; lanes out at once differ; a forked child (its pid not the store's)
    draws lanes of its own; a closing store forgets the lanes it holds free."""
    from agentplane_redis.drivers import _Lanes

    lanes = _Lanes()
    a, b = lanes.take(), lanes.take()
    assert a[0] != b[0]
    assert int(b[1]) > int(a[1])
    lanes.give(a)
    c = lanes.take()
    assert c[0] == a[0]
    assert int(c[1]) > int(b[1])
    lanes.give(b)
    lanes.give(c)
    lanes._pid = -1  # as the store's lanes look from a forked child
    d = lanes.take()
    assert d[0] not in (a[0], b[0])
    lanes.give(d)
    assert lanes.received() == [d[0]]
    assert lanes.received() == []


def test_every_send_after_a_calls_first_is_unmarked(monkeypatch):
    """A call whose first send ran but whose retry found the library flushed is sent
    again by the ladder once the library is back: unmarked, so it answers the first
    execution's reply instead of running again."""
    store = RedisStore(fakeredis.FakeRedis(), tenant="t")
    driver = store._driver
    real, tails = driver._run, []

    def flushed_after_first(
        step: Any, tail: tuple[Any, ...], options: Any, again: Any = None, wire: Any = None
    ) -> Any:
        tails.append(tail[-1])
        reply = real(step, tail, options, again, wire)
        if len(tails) == 1:  # it ran; the retry of its lost reply met a flushed library
            raise redis.ResponseError("Function not found")
        return reply

    monkeypatch.setattr(driver, "_run", flushed_after_first)
    assert store.timers.arm(timer("r", "t", 0)) is True  # not False: it ran once
    assert [tail[:1] for tail in tails] == ["+", tails[1][:1]]
    assert tails[0] == "+" + tails[1]
    assert store.timers.pending_count() == 1


@pytest.fixture(params=["redis7", "valkey8"])
def single(request: pytest.FixtureRequest, servers: Any) -> Any:
    """A real single server of the session: its URL (the tests use tenants and client
    names of their own)."""
    if request.param not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{request.param} not selected")
    return servers.get(request.param).url


def _named(url: str, **options: Any) -> tuple[redis.Redis, str]:
    """A client whose connections carry a name of their own, and that name."""
    name = f"wire-{uuid.uuid4().hex[:12]}"
    return redis.Redis.from_url(url, client_name=name, **options), name


def _connections(url: str, name: str) -> list[dict[str, Any]]:
    admin = redis.Redis.from_url(url)
    try:
        return [c for c in admin.client_list() if c.get("name") == name]
    finally:
        admin.close()


def _tenant() -> str:
    return f"wire-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_single_connection_client_is_served_by_execute_command(single, flavour):
    """A store on a single-connection client sends through execute_command, and works."""
    if flavour == "sync":
        client = redis.Redis.from_url(single, single_connection_client=True)
        store = RedisStore(client, tenant=_tenant())
        assert store._driver._wire is None
        _life(store)
        client.close()
        return
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis.from_url(single, single_connection_client=True)
    astore = AsyncRedisStore(aclient, tenant=_tenant())
    assert astore._driver._wire is None
    _life(Blocking(astore, loop))
    loop.run_until_complete(aclient.aclose())
    loop.close()


def test_a_single_connection_fake_client_is_served_by_execute_command():
    client = fakeredis.FakeRedis(single_connection_client=True)
    store = RedisStore(client, tenant="acme")
    assert store._driver._wire is None
    _life(store)


# ---------------------------------------------------------------- the kept connection


def test_a_kept_connection_killed_between_calls_is_replaced_unseen(single):
    """CLIENT KILL of the kept connection between two calls: the next call is sent on
    a new connection, so even a client that never retries sees no error."""
    client, name = _named(single, retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, tenant=_tenant())
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert len(store._driver._wire._kept.idle) == 1
    (kept,) = _connections(single, name)
    admin = redis.Redis.from_url(single)
    assert admin.client_kill_filter(_id=kept["id"]) == 1
    admin.close()
    assert store.events.buffer(ev("e2", "k/1"), at=at(1))
    assert store.events.stats().live == 2
    client.close()


def test_a_closed_client_reconnects_on_its_next_call(single):
    client = redis.Redis.from_url(single)
    store = RedisStore(client, tenant=_tenant())
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    client.connection_pool.disconnect()
    assert store.events.buffer(ev("e2", "k/1"), at=at(1))
    client.close()


def test_other_pools_lend_a_connection_per_call(single):
    """A BlockingConnectionPool's connection goes back after each call: with one
    connection in the pool, the client's own commands still get it between calls."""
    pool = redis.BlockingConnectionPool.from_url(single, max_connections=1, timeout=1)
    client = redis.Redis(connection_pool=pool)
    store = RedisStore(client, tenant=_tenant())
    for i in range(3):
        assert store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))
        assert client.ping()
    assert store._driver._wire._kept is None
    client.close()


def test_threads_share_a_store_and_keep_at_most_one_connection(single):
    """Eight threads call one store at once: every call answers its own, and between
    calls the wire keeps one connection (the others go back to the pool)."""
    client = redis.Redis.from_url(single)
    store = RedisStore(client, tenant=_tenant())
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


def test_stores_on_one_client_keep_one_connection_between_them(single):
    """Two hundred short-lived stores on one client: the pool keeps one connection
    for them all, never one per store."""
    client, name = _named(single)
    for _ in range(200):
        store = RedisStore(client, tenant=_tenant())
        assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert len(_connections(single, name)) <= 2  # the kept one, and one for INFO
    client.close()


def test_a_small_pool_lends_per_call(single):
    """A pool of fewer than KEEP_FROM connections keeps none."""
    client = redis.Redis.from_url(single, max_connections=KEEP_FROM - 1)
    store = RedisStore(client, tenant=_tenant())
    assert store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store._driver._wire._kept is None
    client.close()


def test_a_forked_process_uses_a_connection_of_its_own(single):
    """After fork, parent and child call the same store at once, the child buffering
    events stored before (each a duplicate) and the parent new ones: each gets its
    own replies, which a shared socket would mix."""
    client = redis.Redis.from_url(single, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, tenant=_tenant())
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


@pytest.fixture(params=["redis7-cluster", "valkey8-cluster"])
def cluster_url(request: pytest.FixtureRequest, servers: Any) -> Any:
    """A real cluster of the session: a node's URL."""
    if request.param not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{request.param} not selected")
    return servers.get(request.param).url


def _retried_through_the_cluster(
    store: Any, wired: list[bytes], executed: list[tuple[Any, ...]]
) -> None:
    """An arm whose first send (on the wire, marked) lost its reply after it ran:
    sent again through RedisCluster, unmarked, it answers the first execution's
    reply; the next call takes the wire again."""
    assert store.timers.arm(timer("r", "t", 0)) is True  # not SEEN: it ran once
    number = wired[0].rstrip(b"\r\n").rpartition(b"\r\n")[2]
    assert number.startswith(b"+")
    assert len(executed) == 1
    assert str(executed[0][-1]) == number[1:].decode()
    assert store.timers.pending_count() == 1
    assert len(wired) == 2
    assert len(executed) == 1


def test_on_a_cluster_a_try_after_a_lost_reply_goes_through_redis_cluster(cluster_url, monkeypatch):
    """A sync store on a cluster sends a writing call first on the slot owner's wire,
    marked; where its reply is lost after it ran, the next try goes through
    RedisCluster unmarked and answers the first execution's reply, and the calls
    after it take the wire again."""
    client = redis.RedisCluster.from_url(cluster_url)
    store = RedisStore(client, tenant=_tenant())
    real_send, real_execute = Wire.send, client.execute_command
    wired: list[bytes] = []
    executed: list[tuple[Any, ...]] = []

    def lost_once(self: Wire, packed: bytes, again: Any = None) -> Any:
        wired.append(packed)
        reply = real_send(self, packed, again)
        if len(wired) == 1:
            raise redis.ConnectionError("the reply was lost")  # after the call ran
        return reply

    def recorded(*args: Any, **options: Any) -> Any:
        if args and args[0] == "FCALL":
            executed.append(args)
        return real_execute(*args, **options)

    monkeypatch.setattr(Wire, "send", lost_once)
    monkeypatch.setattr(client, "execute_command", recorded)
    try:
        _retried_through_the_cluster(store, wired, executed)
    finally:
        client.close()


def test_on_a_cluster_an_async_store_s_try_after_a_lost_reply_goes_through_redis_cluster(
    cluster_url, monkeypatch
):
    """The same for an async store: its first try on the wire of its own client of
    the slot's master, marked; the next, after a lost reply, through RedisCluster."""
    loop = asyncio.new_event_loop()
    client = redis.asyncio.RedisCluster.from_url(cluster_url)
    astore = AsyncRedisStore(client, tenant=_tenant())
    store = Blocking(astore, loop)
    real_send, real_execute = AsyncWire.send, client.execute_command
    wired: list[bytes] = []
    executed: list[tuple[Any, ...]] = []

    async def lost_once(self: AsyncWire, packed: bytes, again: Any = None) -> Any:
        wired.append(packed)
        reply = await real_send(self, packed, again)
        if len(wired) == 1:
            raise redis.ConnectionError("the reply was lost")  # after the call ran
        return reply

    async def recorded(*args: Any, **options: Any) -> Any:
        if args and args[0] == "FCALL":
            executed.append(args)
        return await real_execute(*args, **options)

    monkeypatch.setattr(AsyncWire, "send", lost_once)
    monkeypatch.setattr(client, "execute_command", recorded)
    try:
        _retried_through_the_cluster(store, wired, executed)
    finally:
        loop.run_until_complete(astore.close_connection())
        loop.close()
