"""A write whose reply is lost never comes back as a different answer (contract 7.4, 10).

A proxy on loopback lets every command reach a real server and swallows the
reply of one, closing the connection: the server ran the script, the client
sees a connection error. Either redis-py re-sends the call (its own retries),
or the client gives up, the store raises ``OutcomeUnknown``, and the caller
calls again. Both must answer what the first execution did, and leave the
data exactly as one execution does (compared with a control tenant that lost
nothing).

The same runs through redis-py's cluster clients: a one-master cluster that
announces the proxy's port, so ``RedisCluster`` reaches its node through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from agentplane_redis import AsyncRedisStore, OutcomeUnknown, RedisStore, acl
from agentplane_redis.drivers import _Lanes
from agentplane_redis.embedded import Cluster, Server, ServerUnavailable
from agentplane_redis.keys import BUCKETED, ROLES
from agentplane_redis.scripts import catalogue

from conftest import KINDS, Blocking
from faults import ReplyLosingProxy
from helpers import at, ev, sub, timer

pytestmark = pytest.mark.real

E1, W = ev("e1", "k/1"), sub("r", "w", "k/1")


def _events(store: Any, n: int) -> None:
    for i in range(n):
        store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))


def _timers(store: Any, n: int) -> None:
    for i in range(n):
        store.timers.arm(timer("r", f"t{i:02}", i))


# name -> (setup, the call whose reply is lost, replies to let through first)
SCENARIOS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], int]] = {
    "buffer": (lambda s: None, lambda s: s.events.buffer(E1, at=at(0)), 0),
    "deliver": (
        lambda s: s.events.subscribe(W, at=at(0)),
        lambda s: s.events.deliver(E1, at=at(1)),
        0,
    ),
    "deliver_to": (
        lambda s: s.events.subscribe(W, at=at(0)),
        lambda s: s.events.deliver_to("r", E1, at=at(1)),
        0,
    ),
    "match_waiter": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.subscribe(W, at=at(0))),
        lambda s: s.events.match_waiter(E1, at=at(1)),
        0,
    ),
    "wait": (lambda s: s.events.buffer(E1, at=at(0)), lambda s: s.events.wait(W, at=at(1)), 0),
    "claim_for": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.subscribe(W, at=at(0))),
        lambda s: s.events.claim_for(W, at=at(1)),
        0,
    ),
    "subscribe": (lambda s: None, lambda s: s.events.subscribe(W, at=at(0)), 0),
    "park_wait": (lambda s: None, lambda s: s.events.park_wait(W, at=at(0)), 0),
    "unsubscribe": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.wait(W, at=at(1))),
        lambda s: s.events.unsubscribe("r", "w"),
        0,
    ),
    "unsubscribe_run": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.wait(W, at=at(1))),
        lambda s: s.events.unsubscribe_run("r", ["w"]),
        0,
    ),
    "erase_payload": (
        lambda s: s.events.buffer(E1, at=at(0)),
        lambda s: s.events.erase_payload("src", "e1"),
        0,
    ),
    "sweep_unclaimed (step 2 of 3)": (
        lambda s: _events(s, 20),
        lambda s: s.events.sweep_unclaimed(at(100)),
        1,
    ),
    "purge (step 2 of 3)": (
        lambda s: (_events(s, 70), s.events.sweep_unclaimed(at(100))),
        lambda s: s.events.purge(at(100)),
        1,
    ),
    "parked_waits": (
        lambda s: [s.events.park_wait(sub("r", f"w{i}", "k/1"), at=at(i)) for i in range(30)],
        lambda s: s.events.parked_waits(),
        1,
    ),
    "seal": (lambda s: None, lambda s: s.runs.seal("r"), 0),
    "close": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.wait(W, at=at(1)), _timers(s, 2)),
        lambda s: s.runs.close("r", ["w"]),
        0,
    ),
    "revive": (
        lambda s: (s.events.buffer(E1, at=at(0)), s.events.sweep_unclaimed(at(0))),
        lambda s: s.events.revive("src", "e1", at=at(5)),
        0,
    ),
    "revive (resumes a wait)": (
        lambda s: (
            s.events.buffer(E1, at=at(0)),
            s.events.sweep_unclaimed(at(0)),
            s.events.subscribe(W, at=at(1)),
        ),
        lambda s: s.events.revive("src", "e1", at=at(5)),
        0,
    ),
    "arm": (lambda s: None, lambda s: s.timers.arm(timer("r", "t", 0)), 0),
    "reschedule": (
        lambda s: _timers(s, 2),
        lambda s: s.timers.reschedule("r", "t00", at(50)),
        0,
    ),
    "reschedule (a timer whose lease lapsed)": (
        lambda s: (_timers(s, 2), s.timers.claim_due(now=at(10), lease=timedelta(hours=1))),
        lambda s: s.timers.reschedule("r", "t00", at(50)),
        0,
    ),
    "claim_due (step 2 of 3)": (
        lambda s: _timers(s, 40),
        lambda s: s.timers.claim_due(now=at(100), lease=timedelta(seconds=30)),
        1,
    ),
    "disarm": (lambda s: _timers(s, 1), lambda s: s.timers.disarm("r", "t00"), 0),
    "disarm_run": (lambda s: _timers(s, 3), lambda s: s.timers.disarm_run("r"), 0),
    "disarm_many": (
        lambda s: _timers(s, 3),
        lambda s: s.timers.disarm_many([("r", "t00"), ("r", "t02")]),
        0,
    ),
}

#: Roles whose contents depend on the server clock or on call tokens, not on the calls.
NOT_COMPARED = {"seals", "replies"}


def data_by_role(raw: Any, store: Any) -> dict[str, Any]:
    """Each role's key dumped; the timer buckets, each that exists, by key."""
    found = {
        role: raw.dump(store.keys.key(role))
        for role in ROLES
        if role not in NOT_COMPARED and role not in BUCKETED
    }
    tag = store.keys.acl_pattern()[1:-1]
    for key in raw.scan_iter(match=tag + "timer:[0-9]*"):
        name = key.decode() if isinstance(key, bytes) else key
        found[name.rsplit(":", 1)[1]] = raw.dump(key)
    return found


class Rig:
    """A real server, a proxy in front of it, and stores of one flavour through it
    (through a cluster client when the server is a cluster's one node)."""

    def __init__(
        self, server: Any, flavour: str, proxy: ReplyLosingProxy, cluster: bool = False
    ) -> None:
        self.server, self.flavour, self.proxy, self.cluster = server, flavour, proxy, cluster
        self.loop = asyncio.new_event_loop() if flavour == "async" else None
        self.raw = redis.Redis(port=server.port)
        self.raw.flushall()
        # Loaded first, so that no reply that lacks a function or script is the lost one.
        acl.load_library(self.raw)
        for script in catalogue().values():
            self.raw.script_load(script.source)
        self.closers: list[Callable[[], Any]] = []

    def store(self, tenant: str, *, retries: int, direct: bool = False) -> Any:
        port = self.server.port if direct else self.proxy.port
        if self.cluster:
            # A cluster store sends each call to its slot's owner itself, so the store,
            # not redis-py, sends it again: within its patience, given for "retries".
            return self._cluster_store(tenant, port, retries, patience=10 if retries else 0)
        if self.loop is None:
            client = redis.Redis(port=port, retry=Retry(NoBackoff(), retries))
            self.closers.append(client.close)
            return RedisStore(client, tenant=tenant)
        aclient = redis.asyncio.Redis(
            port=port, retry=redis.asyncio.retry.Retry(NoBackoff(), retries)
        )
        astore = AsyncRedisStore(aclient, tenant=tenant)
        self.loop.run_until_complete(astore.check())
        self.closers.append(lambda: self.loop.run_until_complete(aclient.aclose()))
        return Blocking(astore, self.loop)

    def _cluster_store(self, tenant: str, port: int, retries: int, patience: float = 0) -> Any:
        """A store that does not re-send (cluster_patience=0) unless given patience: the
        node announces the proxy's port, so every call goes through the proxy."""
        if self.loop is None:
            client = redis.RedisCluster("127.0.0.1", port, retry=Retry(NoBackoff(), retries))
            self.closers.append(client.close)
            return RedisStore(client, tenant=tenant, cluster_patience=patience)
        aclient = redis.asyncio.RedisCluster(
            "127.0.0.1", port, retry=redis.asyncio.retry.Retry(NoBackoff(), retries)
        )
        astore = AsyncRedisStore(aclient, tenant=tenant, cluster_patience=patience)
        self.loop.run_until_complete(astore.check())
        self.closers.append(lambda: self.loop.run_until_complete(astore.close_connection()))
        return Blocking(astore, self.loop)

    def close(self) -> None:
        for close in self.closers:
            close()
        self.raw.close()
        if self.loop is not None:
            self.loop.close()


class OneNodeClusters:
    """One-master clusters, one per kind, started on first use."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.running: dict[str, Cluster] = {}

    def get(self, kind: str) -> Server:
        if kind not in self.running:
            try:
                self.running[kind] = Cluster(kind, masters=1, replicas=0).start()
            except ServerUnavailable as missing:
                if self.config.getoption("--require-servers"):
                    pytest.fail(str(missing))
                pytest.skip(str(missing))
        return self.running[kind].nodes[0]


@pytest.fixture(scope="module")
def one_node_clusters(request: pytest.FixtureRequest) -> Iterator[OneNodeClusters]:
    clusters = OneNodeClusters(request.config)
    yield clusters
    for cluster in clusters.running.values():
        cluster.stop()


BACKENDS = ("redis7", "valkey8", "redis7-cluster", "valkey8-cluster")


RIGS = [pytest.param((b, f), id=f"{b}-{f}") for b in BACKENDS for f in ("sync", "async")]
CLUSTER_RIGS = [p for p in RIGS if p.values[0][0].endswith("-cluster")]


@pytest.fixture(params=RIGS)
def rig(
    request: pytest.FixtureRequest, servers: Any, one_node_clusters: OneNodeClusters
) -> Iterator[Rig]:
    backend, flavour = request.param
    if backend not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{backend} not selected")
    cluster = backend.endswith("-cluster")
    server = one_node_clusters.get(KINDS[backend]) if cluster else servers.get(backend)
    with ReplyLosingProxy(server.port) as proxy:
        if cluster:
            with redis.Redis(port=server.port) as admin:
                admin.config_set("cluster-announce-port", proxy.port)
        r = Rig(server, flavour, proxy, cluster)
        yield r
        r.close()


def control_and_lossy(rig: Rig, name: str, retries: int) -> tuple[Any, Any, Any]:
    """The scenario's answer on a control tenant that loses nothing, and a lossy tenant
    set up alike, whose next call (after ``after`` replies) loses its reply."""
    setup, call, after = SCENARIOS[name]
    control = rig.store("control", retries=0, direct=True)
    setup(control)
    expected = call(control)
    lossy = rig.store("lossy", retries=retries)
    setup(lossy)
    rig.proxy.lose_next(after=after)
    return control, lossy, expected


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_call_resent_by_the_client_answers_its_first_execution(rig, name):
    """redis-py (on a cluster, the store) re-sends the call after the lost reply: same
    answer, same data, as one run."""
    control, lossy, expected = control_and_lossy(rig, name, retries=3)
    assert SCENARIOS[name][1](lossy) == expected
    assert rig.proxy.lost == 1
    assert data_by_role(rig.raw, lossy) == data_by_role(rig.raw, control)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_after_outcome_unknown_calling_again_answers_the_first_execution(rig, name):
    """The client gives up: OutcomeUnknown; the same call again gets the first answer."""
    control, lossy, expected = control_and_lossy(rig, name, retries=0)
    call = SCENARIOS[name][1]
    with pytest.raises(OutcomeUnknown) as unknown:
        call(lossy)
    assert isinstance(unknown.value, redis.ConnectionError)
    assert call(lossy) == expected
    assert data_by_role(rig.raw, lossy) == data_by_role(rig.raw, control)


@pytest.mark.parametrize("rig", CLUSTER_RIGS, indirect=True)
@pytest.mark.parametrize("name", ["deliver", "claim_for", "claim_due (step 2 of 3)"])
def test_on_a_cluster_the_store_resends_a_lost_call_itself(rig, name):
    """A cluster client that gives up at once: the store sends the call again (within
    its cluster_patience) and gets the first execution's answer."""
    setup, call, after = SCENARIOS[name]
    control = rig.store("control", retries=0, direct=True)
    setup(control)
    expected = call(control)
    lossy = rig._cluster_store("lossy", rig.proxy.port, retries=0, patience=10)
    setup(lossy)
    rig.proxy.lose_next(after=after)
    assert call(lossy) == expected
    assert rig.proxy.lost == 1
    assert data_by_role(rig.raw, lossy) == data_by_role(rig.raw, control)


def test_a_different_call_after_outcome_unknown_runs_anew(rig):
    """Only the same method with the same arguments resumes; another call is its own."""
    lossy = rig.store("lossy", retries=0)
    rig.proxy.lose_next()
    with pytest.raises(OutcomeUnknown):
        lossy.events.buffer(E1, at=at(0))
    assert lossy.events.buffer(ev("e2", "k/1"), at=at(0)) is True
    assert lossy.events.buffer(E1, at=at(0)) is True  # resumed: the lost call had stored it
    assert lossy.events.buffer(E1, at=at(0)) is False  # a new call: a duplicate


def test_a_store_keeps_one_remembered_reply_per_lane(rig):
    """Each writing call remembers its reply in its store's lane, and the lane's next
    call replaces it: a store calling one at a time keeps one remembered reply."""
    store = rig.store("acme", retries=0, direct=True)
    for i in range(50):
        store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))
        store.timers.arm(timer("r", f"t{i}", i))
        assert len(_remembered(rig, store)) == 1


def test_calls_after_outcome_unknown_leave_its_lane_alone(rig):
    """The lost call keeps its lane while it waits for a call again: the store's other
    calls take another, so none of them replaces the lost call's reply."""
    lossy = rig.store("lossy", retries=0)
    rig.proxy.lose_next()
    with pytest.raises(OutcomeUnknown):
        lossy.events.buffer(E1, at=at(0))
    for i in range(5):
        assert lossy.timers.arm(timer("r", f"t{i}", i)) is True
    assert len(_remembered(rig, lossy)) == 2  # the lost call's lane, and one more
    assert lossy.events.buffer(E1, at=at(0)) is True  # resumed: its first execution's answer
    assert lossy.events.buffer(E1, at=at(0)) is False  # a new call: a duplicate


def _remembered(rig: Rig, store: Any) -> list[bytes]:
    """Every remembered reply of the store's tenant, both generations (not the field ""
    that counts a generation's bytes)."""
    keys = [store.keys.key("replies"), store.keys.key("replies_old")]
    return [v for key in keys for t, v in rig.raw.hgetall(key).items() if t != b""]


def _careless(store: Any) -> Any:
    """The store, made to give each call a lane never used before: a client that
    never reuses a lane (one-shot stores, each a call, that never close)."""
    driver = store._target._driver if isinstance(store, Blocking) else store._driver
    driver._lanes = _NoReuse()
    return store


class _NoReuse(_Lanes):
    def give(self, ticket: Any) -> None:
        """Keeps the lane out of use."""


def test_a_closing_store_acknowledges_every_reply_it_received(rig):
    """A store used for a few calls (a CLI run, a per-request handler) leaves no
    remembered reply behind once it closes."""
    store = rig.store("acme", retries=0, direct=True)
    for i in range(7):
        store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))
    assert len(_remembered(rig, store)) == 1
    store.close_connection()
    assert _remembered(rig, store) == []  # the byte count stays, and rotates as before


#: The bytes one generation of remembered replies counts (``lua/_lib/core.lua``): each
#: entry its lane, its number, its text and 80 for the hash's bookkeeping.
REPLY_GENERATION_BYTES, REPLY_ENTRY = 1 << 20, 80


def test_a_reply_is_remembered_across_a_generation_of_careless_clients(rig):
    """A lost reply still answers after a generation's worth of unacknowledged writes by
    others moved it into the old generation; the tenant never keeps more than two."""
    lossy = rig.store("acme", retries=0)
    rig.proxy.lose_next()
    with pytest.raises(OutcomeUnknown):
        lossy.events.buffer(E1, at=at(0))
    careless = _careless(rig.store("acme", retries=0, direct=True))
    old = lossy.keys.key("replies_old")
    for i in range(REPLY_GENERATION_BYTES // 80):  # each entry counts more than 80
        careless.timers.arm(timer("r", f"t{i}", i))
    assert rig.raw.exists(old)  # rotated
    counted = [int(rig.raw.hget(key, "") or 0) for key in (lossy.keys.key("replies"), old)]
    assert sum(counted) <= 2 * REPLY_GENERATION_BYTES
    assert lossy.events.buffer(E1, at=at(0)) is True  # the first execution's answer


def test_no_remembered_reply_keeps_a_payload(rig):
    """A claim's reply, remembered for a call re-sent after a lost reply, holds no
    payload bytes: the card number is in no reply, and calling again after
    erase_payload answers the first execution's claim with the payload as it is now
    (null). Released events (unsubscribe_run) are remembered without theirs too."""
    card = "4242424242424242"
    store = rig.store("acme", retries=0)
    store.events.buffer(ev("e1", "k/1", payload={"card": card}), at=at(0))
    store.events.subscribe(W, at=at(0))
    rig.proxy.lose_next()
    with pytest.raises(OutcomeUnknown):
        store.events.claim_for(W, at=at(1))
    assert not [r for r in _remembered(rig, store) if card.encode() in r]
    assert store.events.erase_payload("src", "e1") is True
    claimed = store.events.claim_for(W, at=at(1))
    assert claimed.event.id == "e1"
    assert claimed.event.payload is None
    store.events.buffer(ev("e2", "k/2", payload={"card": card}), at=at(2))
    assert store.events.wait(sub("r", "w2", "k/2"), at=at(3)).event.payload == {"card": card}
    released = store.events.unsubscribe_run("r", ["w2"]).released
    assert [(e.id, e.payload) for e in released] == [("e2", {"card": card})]
    assert not [r for r in _remembered(rig, store) if card.encode() in r]


def test_from_url_builds_a_client_that_detects_and_resends(rig):
    """from_url sets a socket timeout and retries: a lost reply is resent and replayed."""
    if rig.flavour == "async":
        store = Blocking(AsyncRedisStore.from_url(rig.proxy.url, tenant="acme"), rig.loop)
        rig.closers.append(lambda: rig.loop.run_until_complete(store._target.close_connection()))
    else:
        store = RedisStore.from_url(rig.proxy.url, tenant="acme")
        rig.closers.append(store.close_connection)
    store.events.stats()
    if rig.cluster:
        assert "Cluster" in type(store.client).__name__
        retry = store.client.retry
        if rig.flavour == "async":
            kwargs = store.client.get_default_node().connection_kwargs
        else:
            node = store.client.get_default_node()
            kwargs = node.redis_connection.connection_pool.connection_kwargs
    else:
        kwargs = store.client.connection_pool.connection_kwargs
        retry = kwargs["retry"]
    assert kwargs["socket_timeout"] is not None
    assert retry.get_retries() > 0
    rig.proxy.lose_next()
    assert store.events.buffer(E1, at=at(0)) is True
    assert rig.proxy.lost == 1
