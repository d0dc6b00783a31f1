"""Random operation sequences against the reference model and the store: no divergence.

Small alphabets make collisions (same pair, same key, same run) common, and
identifiers with NUL, separators and shared prefixes exercise the encodings.
Runs over fakeredis and the real servers (sync; the async store runs the same
plans, and the battery covers it).
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import hypothesis.strategies as st
import pytest
import redis
from audit import Audit
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from agentplane_redis import (
    CorrelationKey,
    InboundEvent,
    Operator,
    Phase,
    RedisStore,
    Subscription,
    Timer,
    drivers,
)
from agentplane_redis.scripts import load, lua_root

from helpers import at, paged
from keyguard import guarded, guarded_library
from model import Model

RUNS = st.sampled_from(["a", "a\x00", "ab", "b"])
EFFECTS = st.sampled_from(["w", "w\x00x", "x"])
SOURCES = st.sampled_from(["s", "s\x1f", "t"])
IDS = st.sampled_from(["1", "2", "3", "1\x00"])
KINDS = st.sampled_from(["k", "j"])
KEYS = st.lists(
    st.builds(CorrelationKey, st.sampled_from(["o", "o\x00"]), st.sampled_from(["1", "2"])),
    max_size=3,
)
TIMES = st.integers(0, 40)
#: Events' and waits' instants: most within 40 ms (one time bucket), some hours
#: apart, so that time buckets open, fill, empty and are asked for (NEED).
WHEN = st.one_of(TIMES, TIMES, st.integers(1, 40).map(lambda h: h * 3_600_000))
NOWS = st.integers(0, 2_000)
LEASES = st.sampled_from([1, 5, 50, 500])
PAYLOADS = st.one_of(
    st.none(), st.integers(-3, 3), st.dictionaries(st.sampled_from("ab"), st.booleans(), max_size=2)
)
OPERATORS = st.one_of(
    st.none(), st.builds(Operator, st.sampled_from(["ann", "bo"]), st.just("basis"))
)
LIMITS = st.integers(0, 6)
PAGES = st.integers(1, 4)

EVENTS = st.builds(InboundEvent, SOURCES, IDS, KINDS, PAYLOADS, KEYS.map(tuple), OPERATORS)
SUBS = st.builds(
    Subscription,
    RUNS,
    EFFECTS,
    KINDS,
    KEYS.filter(bool).map(tuple),
    st.integers(0, 2),
    st.sampled_from(list(Phase)),
    st.sampled_from([None, "c"]),
    st.sampled_from([None, None, "s", "t"]),
)
TIMERS = st.builds(
    Timer,
    RUNS,
    EFFECTS,
    TIMES.map(at),
    st.integers(0, 2),
    st.sampled_from(list(Phase)),
    st.sampled_from([None, "c"]),
)
EFFECT_LISTS = st.lists(EFFECTS, max_size=3)

_tenants = itertools.count()


class Machine(RuleBasedStateMachine):
    make_store: Any = None
    #: Another store of the same tenant (its own client-side hints and bucket
    #: geometry, as another worker or an ingress process holds them), or None.
    make_peer: Any = None
    #: A sync client (bytes) on the same data: after each example the auditor reads
    #: the tenant's raw keys and checks every index and count (audit.py).
    audit_client: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.store = type(self).make_store()
        peer = type(self).make_peer
        self.stores = [self.store] if peer is None else [self.store, peer(self.store)]

    @rule(i=st.integers(0, 1))
    def switch_store(self, i):
        """The next calls go through store i: one registers waits the other then
        delivers to, retires or reads without knowing their buckets."""
        self.store = self.stores[i % len(self.stores)]

    def same(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the store and the model (instants as ms) and compare results."""
        got = getattr_path(self.store, name)(*args, **kwargs)
        margs = [a if not hasattr(a, "tzinfo") else ms(a) for a in args]
        mkw = {k: (ms(v) if hasattr(v, "tzinfo") else v) for k, v in kwargs.items()}
        want = getattr(self.model, name.rsplit(".", maxsplit=1)[-1])(*margs, *mkw.values())
        assert got == want, (name, args, kwargs)
        return got

    @rule(event=EVENTS, t=WHEN)
    def buffer(self, event, t):
        self.same("events.buffer", event, at=at(t))

    @rule(sub=SUBS, t=WHEN)
    def subscribe(self, sub, t):
        self.same("events.subscribe", sub, at=at(t))

    @rule(sub=SUBS, t=WHEN)
    def claim_for(self, sub, t):
        self.same("events.claim_for", sub, at=at(t))

    @rule(event=EVENTS, t=WHEN)
    def match_waiter(self, event, t):
        self.same("events.match_waiter", event, at=at(t))

    @rule(run=RUNS, event=EVENTS, t=WHEN)
    def deliver_to(self, run, event, t):
        self.same("events.deliver_to", run, event, at=at(t))

    @rule(event=EVENTS, t=WHEN)
    def deliver(self, event, t):
        self.same("events.deliver", event, at=at(t))

    @rule(sub=SUBS, t=WHEN)
    def wait(self, sub, t):
        self.same("events.wait", sub, at=at(t))

    @rule(run=RUNS, effect=EFFECTS)
    def unsubscribe(self, run, effect):
        self.same("events.unsubscribe", run, effect)

    @rule(run=RUNS, unanswered=EFFECT_LISTS)
    def unsubscribe_run(self, run, unanswered):
        self.same("events.unsubscribe_run", run, unanswered)

    @rule(sub=SUBS, t=WHEN)
    def park_wait(self, sub, t):
        self.same("events.park_wait", sub, at=at(t))

    @rule(limit=LIMITS)
    def parked_waits(self, limit):
        self.same("events.parked_waits", limit)

    @rule(source=SOURCES, id_=IDS)
    def erase_payload(self, source, id_):
        self.same("events.erase_payload", source, id_)

    @rule(source=SOURCES, id_=IDS)
    def minter(self, source, id_):
        self.same("events.minter", source, id_)

    @rule(t=WHEN, reason=st.sampled_from(["", "late"]))
    def sweep_unclaimed(self, t, reason):
        self.same("events.sweep_unclaimed", at(t), reason)

    @rule(limit=LIMITS)
    def dead_letters(self, limit):
        self.same("events.dead_letters", limit)

    @rule(limit=LIMITS)
    def waiting(self, limit):
        self.same("events.waiting", limit)

    @rule(t=WHEN, limit=LIMITS)
    def purge(self, t, limit):
        self.same("events.purge", at(t), limit=limit)

    @rule(run=RUNS)
    def seal(self, run):
        self.same("runs.seal", run)

    @rule(run=RUNS)
    def is_sealed(self, run):
        self.same("runs.is_sealed", run)

    @rule(run=RUNS, unanswered=EFFECT_LISTS)
    def close(self, run, unanswered):
        self.same("runs.close", run, unanswered)

    @rule(timer=TIMERS)
    def arm(self, timer):
        got = self.store.timers.arm(timer)
        assert got == self.model.arm(timer, ms(timer.fire_at))

    @rule(now=NOWS, limit=LIMITS, lease=LEASES)
    def claim_due(self, now, limit, lease):
        got = self.store.timers.claim_due(
            now=at(now), limit=limit, lease=timedelta(milliseconds=lease)
        )
        assert got == self.model.claim_due(ms(at(now)), limit, lease)

    @rule(run=RUNS, effect=EFFECTS)
    def disarm(self, run, effect):
        self.same("timers.disarm", run, effect)

    @rule(pairs=st.lists(st.tuples(RUNS, EFFECTS), max_size=4))
    def disarm_many(self, pairs):
        self.same("timers.disarm_many", pairs)

    @rule(run=RUNS)
    def disarm_run(self, run):
        self.same("timers.disarm_run", run)

    @rule(limit=LIMITS)
    def pending(self, limit):
        self.same("timers.pending", limit)

    @rule(run=RUNS)
    def armed(self, run):
        self.same("timers.armed", run)

    # ------------------------------------------------------- contract 11, lookups

    @rule(source=SOURCES, id_=IDS, t=WHEN)
    def revive(self, source, id_, t):
        self.same("events.revive", source, id_, at=at(t))

    @rule(source=SOURCES, id_=IDS)
    def lookup_event(self, source, id_):
        assert self.store.events.lookup(source, id_) == self.model.lookup_event(source, id_)

    @rule(run=RUNS, effect=EFFECTS)
    def lookup_wait(self, run, effect):
        assert self.store.events.lookup_wait(run, effect) == self.model.lookup_wait(run, effect)

    @rule()
    def oldest_live(self):
        assert self.store.events.oldest_live() == self.model.oldest_live()

    @rule(run=RUNS, effect=EFFECTS, t=TIMES)
    def reschedule(self, run, effect, t):
        self.same("timers.reschedule", run, effect, at(t))

    @rule(run=RUNS, effect=EFFECTS)
    def lookup_timer(self, run, effect):
        assert self.store.timers.lookup(run, effect) == self.model.lookup_timer(run, effect)

    @rule(run=RUNS)
    def lookup_run(self, run):
        got = self.store.runs.lookup(run)
        assert (got.sealed_at is not None) == got.sealed
        assert replace(got, sealed_at=None) == self.model.lookup_run(run)

    # ------------------------------------------------------- listings, page by page

    @rule(limit=PAGES, newest=st.booleans())
    def live_pages(self, limit, newest):
        got = paged(self.store.events.live_page, limit, newest=newest)
        assert got == self.model.live(newest)

    @rule(limit=PAGES)
    def waiting_pages(self, limit):
        assert paged(self.store.events.waiting_page, limit) == self.model.waiting(10**6)

    @rule(limit=PAGES)
    def dead_letter_pages(self, limit):
        got = paged(self.store.events.dead_letters_page, limit)
        assert got == self.model.dead_letters(10**6)

    @rule(limit=PAGES)
    def parked_wait_pages(self, limit):
        got = paged(self.store.events.parked_waits_page, limit)
        assert got == self.model.parked_waits(10**6)

    @rule(limit=PAGES)
    def pending_pages(self, limit):
        assert paged(self.store.timers.pending_page, limit) == self.model.pending(10**6)

    def teardown(self):
        if type(self).audit_client is not None:
            Audit(type(self).audit_client, self.store.tenant).run()

    @invariant()
    def counts_agree(self):
        assert self.store.events.stats() == self.model.stats()
        assert self.store.timers.pending_count() == self.model.pending_count()
        due = self.store.timers.next_due()
        pending = self.model.pending(1)
        assert due == (pending[0].fire_at if pending else None)


def ms(value: Any) -> int:
    from agentplane_redis.codec import instant

    return instant("t", value)


def getattr_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


CLIENTS = {
    "resp2": {},
    # Replies must not depend on the protocol, nor on the client decoding them.
    "resp3": {"protocol": 3},
    "decoded": {"decode_responses": True},
}


@pytest.mark.parametrize(
    ("target", "client_options"),
    [
        ("fake", "resp2"),
        ("redis7", "resp2"),
        ("valkey8", "resp2"),
        ("redis7", "resp3"),
        ("valkey8", "resp3"),
        ("valkey8", "decoded"),
    ],
)
def test_the_store_behaves_like_the_model(target, client_options, servers, request):
    """Random sequences of every operation give the model's answers and counts."""
    if target not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{target} not selected")
    if target == "fake":
        fake = fakeredis.FakeServer()
        client, raw = fakeredis.FakeRedis(server=fake), fakeredis.FakeRedis(server=fake)
    else:
        client = redis.Redis.from_url(servers.get(target).url, **CLIENTS[client_options])
        raw = redis.Redis.from_url(servers.get(target).url)

    def make_store() -> RedisStore:
        # A fresh tenant per example: isolation makes it an empty store.
        return RedisStore(client, tenant=f"m{next(_tenants)}")

    class Bound(Machine):
        pass

    Bound.make_store = staticmethod(make_store)
    Bound.make_peer = staticmethod(lambda store: RedisStore(client, tenant=store.tenant))
    Bound.audit_client = raw
    run_machine(Bound, request, examples=(150, 2000), steps=(40, 60))


def test_every_backend_and_flavour_behaves_like_the_model(backend, request):
    """The machine through the battery's stores: both clusters, the async store, and
    fakeredis under the key guard (every key a script touches declared)."""
    tenants = itertools.count()

    class Bound(Machine):
        pass

    # A tenant per example, kept on one master of a cluster.
    Bound.make_store = staticmethod(lambda: backend.make(f"{backend.tenant}{next(tenants)}"))
    Bound.make_peer = staticmethod(lambda store: backend.make(store.tenant))
    Bound.audit_client = backend.raw
    run_machine(Bound, request, examples=(25, 400), steps=(40, 60))


#: The bucket sizes of buckets.lua, made a few entries, so that a few waits, events
#: and timers split key, wait and timer buckets and open, fill and tidy time buckets.
SMALL_BUCKETS = {
    "local BUCKET_BASE, BUCKET_LOAD, SPLIT_AT, HASH_PRIME = 8, 16, 48, 4294967291": (
        "local BUCKET_BASE, BUCKET_LOAD, SPLIT_AT, HASH_PRIME = 8, 1, 2, 4294967291"
    ),
    "local WAIT = { LOAD = 64, SPLIT_AT = 160, HEADS = 8 }": (
        "local WAIT = { LOAD = 1, SPLIT_AT = 2, HEADS = 2 }"
    ),
    "local TIME = { TIDY = 16, FULL = 64, FIT = 64, THIN = 48,": (
        "local TIME = { TIDY = 2, FULL = 3, FIT = 3, THIN = 2,"
    ),
}


def test_small_buckets_behave_like_the_model(tmp_path: Path, monkeypatch, request):
    """The machine on a library whose buckets split after two entries and whose time
    buckets hold three members (fakeredis, under the key guard): both stores keep
    meeting a geometry they have not seen (BUCKETS, NEED), and every listing and
    search crosses buckets."""
    root = tmp_path / "lua"
    shutil.copytree(lua_root(), root)
    buckets = root / "_lib" / "buckets.lua"
    text = buckets.read_text(encoding="utf-8")
    for shipped, small in SMALL_BUCKETS.items():
        assert shipped in text
        text = text.replace(shipped, small)
    buckets.write_text(text, encoding="utf-8")
    scripts = {path.stem: load(root, path.stem) for path in sorted(root.glob("*.lua"))}
    small_scripts, small_library = guarded(scripts), guarded_library(scripts, root)
    monkeypatch.setattr(drivers, "catalogue", lambda: small_scripts)
    monkeypatch.setattr(drivers, "library", lambda: small_library)
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    tenants = itertools.count()

    class Bound(Machine):
        pass

    Bound.make_store = staticmethod(lambda: RedisStore(client, tenant=f"s{next(tenants)}"))
    Bound.make_peer = staticmethod(lambda store: RedisStore(client, tenant=store.tenant))
    Bound.audit_client = client
    run_machine(Bound, request, examples=(60, 1000), steps=(40, 60))


def run_machine(
    machine: type[Machine], request: Any, examples: tuple[int, int], steps: tuple[int, int]
) -> None:
    """Runs the machine: (default, --soak) examples and steps; derandomized by default."""
    soak = bool(request.config.getoption("--soak"))
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples[soak],
            stateful_step_count=steps[soak],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=not soak,
        ),
    )


def populate_neighbour(store: RedisStore) -> None:
    """Tenant B: the same identifiers, keys and kinds the machine uses in tenant A."""
    store.events.buffer(
        InboundEvent("s", "1", "k", {"b": 1}, (CorrelationKey("o", "1"),)), at=at(0)
    )
    store.events.buffer(InboundEvent("t", "2", "j", None, (CorrelationKey("o", "2"),)), at=at(1))
    store.events.subscribe(Subscription("a", "w", "k", (CorrelationKey("o", "2"),)), at=at(0))
    store.events.park_wait(Subscription("b", "x", "j", (CorrelationKey("o", "1"),)), at=at(0))
    store.events.wait(Subscription("ab", "w", "j", (CorrelationKey("o", "2"),)), at=at(2))
    store.events.buffer(InboundEvent("s", "3", "k", [1], (CorrelationKey("o\x00", "1"),)), at=at(3))
    store.events.sweep_unclaimed(at(3))
    store.timers.arm(Timer("a", "w", at(5)))
    store.timers.arm(Timer("b", "x", at(0)))
    store.timers.claim_due(now=at(10), limit=1, lease=timedelta(milliseconds=5))
    store.runs.seal("a\x00")


def snapshot(client: Any, store: RedisStore) -> dict[str, Any]:
    """Everything of one tenant, raw: its keys as stored (less call-token bookkeeping)."""
    found = client.scan_iter(match=store.keys.acl_pattern()[1:], count=1000)
    names = (k.decode() if isinstance(k, bytes) else k for k in found)
    keys = [k for k in names if not k.endswith((":reply", ":reply:old"))]
    return {k: client.dump(k) for k in sorted(keys)}


@pytest.mark.parametrize("target", ["fake", "valkey8"])
def test_operations_in_one_tenant_never_touch_another(target, servers, request):
    """Random sequences in tenant A, next to a tenant B holding the same identifiers: A
    still answers like the model (nothing of B shows), and B's keys never change."""
    if target not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{target} not selected")
    if target == "fake":
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        client = redis.Redis.from_url(servers.get(target).url)
    # Glob characters and a shared prefix: t* must never reach t*0, t*1, ...
    neighbour = RedisStore(client, tenant="t*")
    populate_neighbour(neighbour)
    before = snapshot(client, neighbour)
    assert sum(v is not None for v in before.values()) >= 15, "B holds too little to guard"

    class Bound(Machine):
        @invariant()
        def neighbour_untouched(self):
            assert snapshot(client, neighbour) == before

    Bound.make_store = staticmethod(lambda: RedisStore(client, tenant=f"t*{next(_tenants)}"))
    Bound.make_peer = staticmethod(lambda store: RedisStore(client, tenant=store.tenant))
    run_machine(Bound, request, examples=(40, 500), steps=(25, 40))
