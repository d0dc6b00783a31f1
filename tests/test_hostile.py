"""Hostile input (contract 9.1): every public method, driven by Hypothesis with one
argument made malformed, raises InvalidInput before any command is sent.

The values come from the extremes a hostile or careless caller reaches for:
wrong types, instants just outside 0001..9999 once in UTC, naive datetimes,
leases of zero, of a microsecond, past the maximum, infinite or NaN, limits
below zero or of the wrong type, payloads that are not JSON, too large, nested
past what json reads back or holding integers json cannot write, lone
surrogates anywhere text goes, and tenants with braces, colons, slashes or
control characters. Glob characters in tenants are valid and isolated
(test_acl.py), so they appear among the good tenants here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import fakeredis
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from test_validation import Tripwire

from agentplane_redis import (
    AsyncRedisStore,
    CorrelationKey,
    InboundEvent,
    InvalidInput,
    Operator,
    RedisStore,
    Subscription,
    Timer,
)

from helpers import data

MAX_PAYLOAD = 1000  # the stores below take at most this many bytes of payload
LONE = st.sampled_from(["\ud800", "a\udfff", "\udc80b"])
NOT_STR = st.one_of(st.none(), st.integers(), st.binary(max_size=3), st.floats(), st.just(["x"]))
BAD_IDENT = st.one_of(st.just(""), LONE, NOT_STR)
GOOD_IDENT = (
    st.text(min_size=1, max_size=6)
    .filter(lambda s: s < "\ud800" or True)
    .filter(lambda s: all(not 0xD800 <= ord(c) <= 0xDFFF for c in s))
)
OFFSETS = st.integers(-23 * 60, 23 * 60).filter(bool).map(lambda m: timezone(timedelta(minutes=m)))
BAD_INSTANT = st.one_of(
    OFFSETS.filter(lambda z: z.utcoffset(None) < timedelta(0)).map(
        lambda z: datetime.max.replace(tzinfo=z)
    ),
    OFFSETS.filter(lambda z: z.utcoffset(None) > timedelta(0)).map(
        lambda z: datetime.min.replace(tzinfo=z)
    ),
    st.datetimes(),  # naive
    st.sampled_from(["2026-01-01", 1767225600, 1.5, b"now"]),
)
#: A required instant (older_than, fire_at): None is not one either.
BAD_REQUIRED = st.one_of(BAD_INSTANT, st.just(None))
GOOD_INSTANT = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(timezone.utc)
)
BAD_LEASE = st.one_of(
    st.timedeltas(max_value=timedelta(microseconds=999)),
    st.timedeltas(min_value=timedelta(days=365, milliseconds=1)),
    st.sampled_from([0, -1, 0.0009, math.nan, math.inf, -math.inf, True, "60", 10**13, 1e300]),
)
BAD_LIMIT = st.one_of(
    st.integers(max_value=-1), st.sampled_from([True, False, 1.0, "10", None, math.nan])
)
BAD_STEP = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=2**32), st.sampled_from([True, 1.0, "1"])
)
BAD_PHASE = st.one_of(st.sampled_from(["", "Forward", "forward ", "FORWARD", 1, None]), LONE)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


BAD_PAYLOAD = st.one_of(
    st.sampled_from([math.nan, math.inf, b"bytes", {1, 2}, object(), {1: "x"}, (1, {2: 3})]),
    LONE.map(lambda s: {"text": s}),
    st.integers(5000, 20_000).map(_nested),
    st.integers(4301, 6000).map(lambda n: {"n": 10**n}),
    st.just("x" * (MAX_PAYLOAD + 1)),
)
BAD_TENANT = st.one_of(
    st.sampled_from(["", "  ", "a{b", "a}b", "{}", "a:b", "a/b", "a" * 65, "é" * 33]),
    st.sampled_from([chr(c) for c in [*range(32), 127]]).map(lambda c: f"x{c}y"),
    LONE,
    NOT_STR,
)
GOOD_TENANT = st.sampled_from(["acme", "a*", "[x]", "?", "\\", "zürich west"])


def _event(bad: dict[str, Any]) -> InboundEvent:
    fields: dict[str, Any] = {"source": "s", "id": "1", "kind": "k", "payload": {"a": 1}}
    fields.update(bad)
    return InboundEvent(**fields)


BAD_EVENT = st.one_of(
    st.sampled_from(["event", None, 7]),
    st.builds(lambda v: _event({"source": v}), BAD_IDENT),
    st.builds(lambda v: _event({"id": v}), BAD_IDENT),
    st.builds(lambda v: _event({"kind": v}), BAD_IDENT),
    st.builds(lambda v: _event({"payload": v}), BAD_PAYLOAD),
    st.builds(lambda v: _event({"correlation": (CorrelationKey(v, "1"),)}), BAD_IDENT),
    st.builds(lambda v: _event({"correlation": (CorrelationKey("o", v),)}), BAD_IDENT),
    st.builds(lambda v: _event({"correlation": v}), st.sampled_from([("o", "1"), "o/1", None])),
    st.builds(lambda v: _event({"by": Operator(v, "b")}), BAD_IDENT),
    st.builds(lambda v: _event({"by": Operator("a", v)}), BAD_IDENT),
    st.builds(lambda v: _event({"by": v}), st.sampled_from([("a", "b"), "ann"])),
)
KEY = (CorrelationKey("o", "1"),)


def _sub(bad: dict[str, Any]) -> Subscription:
    fields: dict[str, Any] = {"run": "r", "effect": "w", "kind": "k", "correlation": KEY}
    fields.update(bad)
    return Subscription(**fields)


BAD_SUB = st.one_of(
    st.sampled_from(["sub", None]),
    st.builds(lambda v: _sub({"run": v}), BAD_IDENT),
    st.builds(lambda v: _sub({"effect": v}), BAD_IDENT),
    st.builds(lambda v: _sub({"kind": v}), BAD_IDENT),
    st.builds(lambda v: _sub({"correlation": v}), st.sampled_from([(), [], None, "o/1"])),
    st.builds(lambda v: _sub({"step": v}), BAD_STEP),
    st.builds(lambda v: _sub({"phase": v}), BAD_PHASE),
    st.builds(lambda v: _sub({"case": v}), BAD_IDENT.filter(lambda v: v is not None)),
    st.builds(lambda v: _sub({"from_source": v}), BAD_IDENT.filter(lambda v: v is not None)),
)


def _timer(bad: dict[str, Any]) -> Timer:
    fields: dict[str, Any] = {"run": "r", "effect": "t", "fire_at": datetime.now(timezone.utc)}
    fields.update(bad)
    return Timer(**fields)


BAD_TIMER = st.one_of(
    st.sampled_from(["timer", None]),
    st.builds(lambda v: _timer({"run": v}), BAD_IDENT),
    st.builds(lambda v: _timer({"effect": v}), BAD_IDENT),
    st.builds(lambda v: _timer({"fire_at": v}), BAD_REQUIRED),
    st.builds(lambda v: _timer({"step": v}), BAD_STEP),
    st.builds(lambda v: _timer({"phase": v}), BAD_PHASE),
    st.builds(lambda v: _timer({"case": v}), BAD_IDENT.filter(lambda v: v is not None)),
)
GOOD_EVENT, GOOD_SUB = _event({}), _sub({})
GOOD_FIRE = datetime(2026, 1, 1, tzinfo=timezone.utc)
BAD_FLAG = st.sampled_from([None, 0, 1, "yes", "True", 1.0])
#: A page's cursor: only a str a previous page gave (or None) is one.
BAD_CURSOR = st.one_of(st.sampled_from([0, 7, b"x", ["x"], 1.5]), LONE)
BAD_EFFECTS = st.one_of(
    st.sampled_from(["w", None, 7]), BAD_IDENT.filter(lambda v: v is not None).map(lambda v: [v])
)
BAD_REASON = st.one_of(LONE, st.sampled_from([None, 1, b"why"]))

Call = Callable[[Any], Any]
#: Every public method, with each of its arguments made bad in turn.
CALLS: st.SearchStrategy[Call] = st.one_of(
    BAD_EVENT.map(lambda e: lambda s: s.events.buffer(e)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.buffer(GOOD_EVENT, at=t)),
    BAD_SUB.map(lambda w: lambda s: s.events.subscribe(w)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.subscribe(GOOD_SUB, at=t)),
    BAD_SUB.map(lambda w: lambda s: s.events.claim_for(w)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.claim_for(GOOD_SUB, at=t)),
    BAD_EVENT.map(lambda e: lambda s: s.events.match_waiter(e)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.match_waiter(GOOD_EVENT, at=t)),
    BAD_IDENT.map(lambda r: lambda s: s.events.deliver_to(r, GOOD_EVENT)),
    BAD_EVENT.map(lambda e: lambda s: s.events.deliver_to("r", e)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.deliver_to("r", GOOD_EVENT, at=t)),
    BAD_EVENT.map(lambda e: lambda s: s.events.deliver(e)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.deliver(GOOD_EVENT, at=t)),
    BAD_SUB.map(lambda w: lambda s: s.events.wait(w)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.wait(GOOD_SUB, at=t)),
    BAD_IDENT.map(lambda r: lambda s: s.events.unsubscribe(r, "w")),
    BAD_IDENT.map(lambda e: lambda s: s.events.unsubscribe("r", e)),
    BAD_IDENT.map(lambda r: lambda s: s.events.unsubscribe_run(r)),
    BAD_EFFECTS.map(lambda u: lambda s: s.events.unsubscribe_run("r", u)),
    BAD_SUB.map(lambda w: lambda s: s.events.park_wait(w)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.park_wait(GOOD_SUB, at=t)),
    BAD_LIMIT.map(lambda n: lambda s: s.events.parked_waits(n)),
    BAD_IDENT.map(lambda v: lambda s: s.events.erase_payload(v, "1")),
    BAD_IDENT.map(lambda v: lambda s: s.events.erase_payload("s", v)),
    BAD_IDENT.map(lambda v: lambda s: s.events.minter(v, "1")),
    BAD_IDENT.map(lambda v: lambda s: s.events.minter("s", v)),
    BAD_REQUIRED.map(lambda t: lambda s: s.events.sweep_unclaimed(t)),
    st.builds(lambda t, r: lambda s: s.events.sweep_unclaimed(t, r), GOOD_INSTANT, BAD_REASON),
    BAD_LIMIT.map(lambda n: lambda s: s.events.dead_letters(n)),
    BAD_LIMIT.map(lambda n: lambda s: s.events.waiting(n)),
    BAD_REQUIRED.map(lambda t: lambda s: s.events.purge(t)),
    st.builds(lambda t, n: lambda s: s.events.purge(t, limit=n), GOOD_INSTANT, BAD_LIMIT),
    BAD_TIMER.map(lambda t: lambda s: s.timers.arm(t)),
    BAD_INSTANT.map(lambda t: lambda s: s.timers.claim_due(now=t)),
    BAD_LIMIT.map(lambda n: lambda s: s.timers.claim_due(limit=n)),
    BAD_LEASE.map(lambda v: lambda s: s.timers.claim_due(lease=v)),
    st.just(lambda s: s.timers.claim_due(now=datetime.max.replace(tzinfo=timezone.utc))),
    BAD_IDENT.map(lambda r: lambda s: s.timers.disarm(r, "t")),
    BAD_IDENT.map(lambda e: lambda s: s.timers.disarm("r", e)),
    BAD_IDENT.map(lambda r: lambda s: s.timers.disarm_run(r)),
    BAD_LIMIT.map(lambda n: lambda s: s.timers.pending(n)),
    BAD_IDENT.map(lambda r: lambda s: s.timers.armed(r)),
    BAD_IDENT.map(lambda r: lambda s: s.runs.seal(r)),
    BAD_IDENT.map(lambda r: lambda s: s.runs.is_sealed(r)),
    BAD_IDENT.map(lambda r: lambda s: s.runs.close(r)),
    BAD_EFFECTS.map(lambda u: lambda s: s.runs.close("r", u)),
    # Contract 11, the lookups and the listings page by page.
    BAD_IDENT.map(lambda v: lambda s: s.events.revive(v, "1")),
    BAD_IDENT.map(lambda v: lambda s: s.events.revive("s", v)),
    BAD_INSTANT.map(lambda t: lambda s: s.events.revive("s", "1", at=t)),
    BAD_IDENT.map(lambda v: lambda s: s.events.lookup(v, "1")),
    BAD_IDENT.map(lambda v: lambda s: s.events.lookup("s", v)),
    BAD_IDENT.map(lambda r: lambda s: s.events.lookup_wait(r, "w")),
    BAD_IDENT.map(lambda e: lambda s: s.events.lookup_wait("r", e)),
    BAD_IDENT.map(lambda r: lambda s: s.timers.reschedule(r, "t", GOOD_FIRE)),
    BAD_IDENT.map(lambda e: lambda s: s.timers.reschedule("r", e, GOOD_FIRE)),
    BAD_REQUIRED.map(lambda t: lambda s: s.timers.reschedule("r", "t", t)),
    BAD_FLAG.map(lambda f: lambda s: s.timers.reschedule("r", "t", GOOD_FIRE, release=f)),
    BAD_IDENT.map(lambda r: lambda s: s.timers.lookup(r, "t")),
    BAD_IDENT.map(lambda e: lambda s: s.timers.lookup("r", e)),
    BAD_IDENT.map(lambda r: lambda s: s.runs.lookup(r)),
    *(
        st.one_of(
            BAD_LIMIT.map(lambda n, p=page: lambda s: p(s)(n)),
            BAD_CURSOR.map(lambda c, p=page: lambda s: p(s)(10, c)),
        )
        for page in (
            lambda s: s.events.parked_waits_page,
            lambda s: s.events.dead_letters_page,
            lambda s: s.events.live_page,
            lambda s: s.events.waiting_page,
            lambda s: s.timers.pending_page,
        )
    ),
    BAD_FLAG.map(lambda f: lambda s: s.events.live_page(10, newest=f)),
)
OPTIONS = st.one_of(
    BAD_TENANT.map(lambda t: {"tenant": t}),
    st.sampled_from(["local", "", None, "SERVER"]).map(lambda c: {"clock": c}),
    st.sampled_from(["safe", "", None, "ACKNOWLEDGED"]).map(lambda d: {"durability": d}),
    BAD_LEASE.map(lambda v: {"timer_lease": v}),
    st.one_of(
        st.integers(max_value=0), st.integers(min_value=512 * 1024 * 1024 + 1), st.just(True)
    ).map(lambda n: {"max_payload_bytes": n}),
)
SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(call=CALLS, tenant=GOOD_TENANT)
def test_every_malformed_argument_is_refused_before_anything_is_sent(call, tenant):
    """One bad argument to any public method: InvalidInput (a ValueError), no command."""
    store = RedisStore(Tripwire(), tenant=tenant, clock="client", max_payload_bytes=MAX_PAYLOAD)
    with pytest.raises(InvalidInput) as refused:
        call(store)
    assert isinstance(refused.value, ValueError)


@SETTINGS
@given(options=OPTIONS)
def test_every_malformed_option_is_refused_at_construction(options):
    """Bad constructor options: InvalidInput for both stores, before any command."""
    with pytest.raises(InvalidInput):
        RedisStore(Tripwire(), **options)
    with pytest.raises(InvalidInput):
        AsyncRedisStore(fakeredis.FakeAsyncRedis(), **options)


SERVER = fakeredis.FakeServer()
FAKE = RedisStore(fakeredis.FakeRedis(server=SERVER), tenant="acme", max_payload_bytes=MAX_PAYLOAD)
FAKE.events.buffer(GOOD_EVENT)
FAKE.events.subscribe(_sub({"run": "q"}))
FAKE.timers.arm(_timer({}))
RAW = fakeredis.FakeRedis(server=SERVER)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(call=CALLS)
def test_a_refused_call_leaves_a_real_store_as_it_was(call):
    """The same calls on a store with data (fakeredis, real Lua): nothing changes."""
    before = data(RAW)
    with pytest.raises(InvalidInput):
        call(FAKE)
    assert data(RAW) == before
