"""Refused input (contract 9.1): InvalidInput before any command reaches Redis."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import hypothesis.strategies as st
import pytest
import redis
from hypothesis import given, settings

from agentplane_redis import (
    CorrelationKey,
    InboundEvent,
    InvalidInput,
    Operator,
    RedisStore,
    Subscription,
    Timer,
    codec,
)
from agentplane_redis.codec import MAX_ID_BYTES, MAX_KEY_BYTES, MAX_KEYS_LIMIT

from helpers import at, data, ev, keys, sub, timer

NAIVE = datetime(2026, 1, 1)
LONE = "\ud800"
# Aware instants that lie outside 0001..9999 once converted to UTC (contract 2.2).
PAST_END = datetime.max.replace(tzinfo=ZoneInfo("America/New_York"))
BEFORE_START = datetime.min.replace(tzinfo=timezone(timedelta(hours=1)))
LAST = datetime.max.replace(tzinfo=timezone.utc)
FIRST = datetime.min.replace(tzinfo=timezone.utc)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _bad_events() -> list[Any]:
    return [
        "not an event",
        InboundEvent("", "i", "k"),
        InboundEvent("s", "", "k"),
        InboundEvent("s", "i", ""),
        InboundEvent(1, "i", "k"),  # type: ignore[arg-type]
        InboundEvent("s" + LONE, "i", "k"),
        InboundEvent("s", "i", "k", correlation=(CorrelationKey("", "v"),)),
        InboundEvent("s", "i", "k", correlation=(CorrelationKey("n", ""),)),
        InboundEvent("s", "i", "k", correlation=(("n", "v"),)),  # type: ignore[arg-type]
        InboundEvent("s", "i", "k", by=Operator("", "b")),
        InboundEvent("s", "i", "k", by=Operator("a", LONE)),
        InboundEvent("s", "i", "k", by=("a", "b")),  # type: ignore[arg-type]
        InboundEvent("s", "i", "k", payload=math.nan),
        InboundEvent("s", "i", "k", payload=[math.inf]),
        InboundEvent("s", "i", "k", payload={1: "int key"}),
        InboundEvent("s", "i", "k", payload={"set": {1, 2}}),
        InboundEvent("s", "i", "k", payload=b"bytes"),
        InboundEvent("s", "i", "k", payload=_cycle()),
        InboundEvent("s", "i", "k", payload="lone " + LONE),
        InboundEvent("s", "i", "k", payload="x" * 2_000_000),
        InboundEvent("s", "i", "k", payload=_nested(5000)),
        InboundEvent("s", "i", "k", payload={"big": 10**5000}),
        InboundEvent("s", "i", "k", payload={"deep": _nested(100_000)}),
    ]


def _bad_subs() -> list[Any]:
    good = sub("r", "w", "k/1")
    return [
        "not a subscription",
        Subscription("r", "w", "paid", ()),
        Subscription("", "w", "paid", good.correlation),
        Subscription("r", "", "paid", good.correlation),
        Subscription("r", "w", "", good.correlation),
        Subscription("r", "w", "paid", good.correlation, step=-1),
        Subscription("r", "w", "paid", good.correlation, step=2**32),
        Subscription("r", "w", "paid", good.correlation, step=True),
        Subscription("r", "w", "paid", good.correlation, step=1.0),  # type: ignore[arg-type]
        Subscription("r", "w", "paid", good.correlation, phase="Forward"),  # type: ignore[arg-type]
        Subscription("r", "w", "paid", good.correlation, phase="forward "),  # type: ignore[arg-type]
        Subscription("r", "w", "paid", good.correlation, case=""),
        Subscription("r", "w", "paid", good.correlation, from_source=""),
        Subscription("r", "w", "paid", good.correlation, from_source=LONE),
    ]


def _bad_timers() -> list[Any]:
    return [
        "not a timer",
        Timer("r", "w", NAIVE),
        Timer("", "w", at(0)),
        Timer("r", "", at(0)),
        Timer("r", "w", at(0), step=-1),
        Timer("r", "w", at(0), phase="compensating "),  # type: ignore[arg-type]
        Timer("r", "w", at(0), case=""),
        Timer("r", "w", "2026-01-01"),  # type: ignore[arg-type]
        Timer("R", "never", PAST_END),
        Timer("R", "before", BEFORE_START),
    ]


def cases() -> list[Any]:
    """(id, call) pairs: each call must raise InvalidInput."""
    out: list[Any] = []
    for n, bad in enumerate(_bad_events()):
        out.append((f"buffer-{n}", lambda s, b=bad: s.events.buffer(b, at=at(0))))
        out.append((f"deliver-{n}", lambda s, b=bad: s.events.deliver(b, at=at(0))))
        out.append((f"deliver_to-{n}", lambda s, b=bad: s.events.deliver_to("r", b, at=at(0))))
        out.append((f"match_waiter-{n}", lambda s, b=bad: s.events.match_waiter(b, at=at(0))))
    for n, bad in enumerate(_bad_subs()):
        for op in ("subscribe", "claim_for", "wait", "park_wait"):
            out.append((f"{op}-{n}", lambda s, b=bad, o=op: getattr(s.events, o)(b, at=at(0))))
    for n, bad in enumerate(_bad_timers()):
        out.append((f"arm-{n}", lambda s, b=bad: s.timers.arm(b)))
    e, w = ev("e1", "k/1"), sub("r", "w", "k/1")
    out += [
        ("buffer-naive-at", lambda s: s.events.buffer(e, at=NAIVE)),
        ("buffer-string-at", lambda s: s.events.buffer(e, at="2026-01-01")),
        ("wait-naive-at", lambda s: s.events.wait(w, at=NAIVE)),
        ("deliver_to-empty-run", lambda s: s.events.deliver_to("", e, at=at(0))),
        ("unsubscribe-empty-run", lambda s: s.events.unsubscribe("", "w")),
        ("unsubscribe-empty-effect", lambda s: s.events.unsubscribe("r", "")),
        ("unsubscribe-lone", lambda s: s.events.unsubscribe("r", LONE)),
        ("unsubscribe_run-empty", lambda s: s.events.unsubscribe_run("")),
        ("unsubscribe_run-str", lambda s: s.events.unsubscribe_run("r", "w")),
        ("unsubscribe_run-empty-effect", lambda s: s.events.unsubscribe_run("r", ["w", ""])),
        ("erase-empty", lambda s: s.events.erase_payload("", "i")),
        ("minter-empty", lambda s: s.events.minter("s", "")),
        ("sweep-naive", lambda s: s.events.sweep_unclaimed(NAIVE)),
        ("sweep-reason", lambda s: s.events.sweep_unclaimed(at(0), None)),
        ("purge-naive", lambda s: s.events.purge(NAIVE)),
        ("purge-limit", lambda s: s.events.purge(at(0), limit=-1)),
        ("purge-bool", lambda s: s.events.purge(at(0), limit=True)),
        ("parked-limit", lambda s: s.events.parked_waits(-1)),
        ("parked-float", lambda s: s.events.parked_waits(1.5)),
        ("dead-limit", lambda s: s.events.dead_letters(-1)),
        ("waiting-bool", lambda s: s.events.waiting(False)),
        ("seal-empty", lambda s: s.runs.seal("")),
        ("is_sealed-int", lambda s: s.runs.is_sealed(1)),
        ("close-empty", lambda s: s.runs.close("")),
        ("close-effects", lambda s: s.runs.close("r", [1])),
        ("claim_due-naive", lambda s: s.timers.claim_due(now=NAIVE)),
        ("claim_due-limit", lambda s: s.timers.claim_due(now=at(0), limit=-1)),
        ("claim_due-lease-0", lambda s: s.timers.claim_due(now=at(0), lease=0)),
        ("claim_due-lease-neg", lambda s: s.timers.claim_due(now=at(0), lease=-5)),
        (
            "claim_due-lease-sub-ms",
            lambda s: s.timers.claim_due(now=at(0), lease=timedelta(microseconds=999)),
        ),
        ("claim_due-lease-str", lambda s: s.timers.claim_due(now=at(0), lease="60")),
        ("claim_due-lease-bool", lambda s: s.timers.claim_due(now=at(0), lease=True)),
        ("claim_due-lease-nan", lambda s: s.timers.claim_due(now=at(0), lease=math.nan)),
        ("disarm-empty", lambda s: s.timers.disarm("r", "")),
        ("disarm_run-empty", lambda s: s.timers.disarm_run("")),
        ("disarm_many-empty", lambda s: s.timers.disarm_many([("r", "")])),
        ("pending-limit", lambda s: s.timers.pending(-1)),
        ("armed-empty", lambda s: s.timers.armed("")),
        ("arm-naive", lambda s: s.timers.arm(timer("r", "w", 0).__class__("r", "w", NAIVE))),
        ("buffer-before-start", lambda s: s.events.buffer(e, at=BEFORE_START)),
        ("deliver-past-end", lambda s: s.events.deliver(e, at=PAST_END)),
        ("claim_for-past-end", lambda s: s.events.claim_for(w, at=PAST_END)),
        ("wait-before-start", lambda s: s.events.wait(w, at=BEFORE_START)),
        ("subscribe-past-end", lambda s: s.events.subscribe(w, at=PAST_END)),
        ("park_wait-past-end", lambda s: s.events.park_wait(w, at=PAST_END)),
        ("match_waiter-past-end", lambda s: s.events.match_waiter(e, at=PAST_END)),
        ("deliver_to-before-start", lambda s: s.events.deliver_to("r", e, at=BEFORE_START)),
        ("sweep-past-end", lambda s: s.events.sweep_unclaimed(PAST_END)),
        ("purge-before-start", lambda s: s.events.purge(BEFORE_START)),
        ("sweep-reason-lone", lambda s: s.events.sweep_unclaimed(at(0), "lone " + LONE)),
        ("claim_due-past-end", lambda s: s.timers.claim_due(now=PAST_END)),
        ("claim_due-lease-overflow", lambda s: s.timers.claim_due(now=LAST, lease=1)),
        ("claim_due-lease-max", lambda s: s.timers.claim_due(now=at(0), lease=timedelta.max)),
        ("claim_due-lease-1e13", lambda s: s.timers.claim_due(now=at(0), lease=10**13)),
        ("claim_due-lease-1e300", lambda s: s.timers.claim_due(now=at(0), lease=1e300)),
        (
            "claim_due-lease-366-days",
            lambda s: s.timers.claim_due(now=at(0), lease=timedelta(days=366)),
        ),
    ]
    return out


CASES = cases()


class Tripwire:
    """A client that fails the test if any script call is sent (it answers the
    store's start-up check, INFO and FUNCTION LIST, as a server without either
    would: unknown command)."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if args[0] in ("INFO", "FUNCTION"):
            raise redis.ResponseError(f"unknown command '{args[0]}'")
        raise AssertionError("a command reached the server")

    def __getattr__(self, name: str) -> Any:
        if name == "connection_pool":  # looked up, never used: a client may have none
            raise AttributeError(name)
        raise AssertionError(f"the client was used: {name}")


@pytest.mark.parametrize(("name", "call"), CASES, ids=[c[0] for c in CASES])
def test_refused_input_never_reaches_redis(name, call):
    """Every refused input raises InvalidInput (a ValueError) before any command is sent."""
    store = RedisStore(Tripwire(), clock="client", max_payload_bytes=1_000_000)
    with pytest.raises(InvalidInput) as caught:
        call(store)
    assert isinstance(caught.value, ValueError)


def test_refused_input_writes_nothing(store, raw):
    """On every backend and flavour, each refused call leaves the data as it was."""
    store.events.buffer(ev("e0", "k/1"), at=at(0))
    store.events.subscribe(sub("r0", "w", "k/2"), at=at(0))
    before = data(raw)
    for name, call in CASES:
        with pytest.raises(InvalidInput):
            call(store)
        assert data(raw) == before, name


@pytest.mark.parametrize(
    "tenant",
    [
        "",
        "   ",
        "a" * 65,
        "é" * 33,
        "a/b",
        "a:b",
        "a{b",
        "a}b",
        "a\x00b",
        "a\nb",
        "a\x7fb",
        "acme\xa0",  # no-break space: would address acme if trimmed, look like it if kept
        "\u2003acme",
        "ac\u200bme",  # zero-width space (Cf): a look-alike of acme
        "\ufeffacme",  # byte-order mark
        "acme\u2060",  # word joiner
        "e\u0301",  # not NFC (NFC writes it as one character)
        LONE,
        7,
        None,
    ],
)
def test_bad_tenants_are_refused(tenant):
    """Tenants: trimmed of ASCII white space, 1-64 bytes of UTF-8 in NFC, no control or
    format character, no other white space at either end, none of / : { }."""
    with pytest.raises(InvalidInput):
        RedisStore(Tripwire(), tenant=tenant)


def test_good_tenants_are_accepted():
    """64 bytes, non-ASCII (in NFC) and spaces inside are fine; outer space is trimmed."""
    assert RedisStore(Tripwire(), tenant="a" * 64).tenant == "a" * 64
    assert RedisStore(Tripwire(), tenant=" zürich west ").tenant == "zürich west"
    assert RedisStore(Tripwire(), tenant="\tacme\n").tenant == "acme"
    assert RedisStore(Tripwire(), tenant="\u00e9").tenant == "\u00e9"


# ---------------------------------------------------------------- bounded input


LONG = "x" * (MAX_ID_BYTES + 1)
LONG_UTF8 = "é" * (MAX_ID_BYTES // 2 + 1)  # within 4 KiB of characters, not of bytes


@pytest.mark.parametrize("long", [LONG, LONG_UTF8], ids=["ascii", "utf8"])
@pytest.mark.parametrize(
    "call",
    [
        lambda s, x: s.events.buffer(ev(x, "k/1"), at=at(0)),
        lambda s, x: s.events.deliver(ev("e", "k/1", source=x), at=at(0)),
        lambda s, x: s.events.deliver(InboundEvent("s", "e", x), at=at(0)),
        lambda s, x: s.events.wait(sub(x, "w", "k/1"), at=at(0)),
        lambda s, x: s.events.subscribe(sub("r", "w", f"k/{x}"), at=at(0)),
        lambda s, x: s.events.deliver(ev("e", f"{x}/1"), at=at(0)),
        lambda s, x: s.events.erase_payload("s", x),
        lambda s, x: s.timers.arm(timer("r", x, 0)),
        lambda s, x: s.timers.disarm_run(x),
        lambda s, x: s.runs.close("r", [x]),
    ],
)
def test_identifiers_past_their_length_are_refused_before_io(call, long):
    """Every identifier is at most MAX_ID_BYTES bytes of UTF-8 (4 KiB), contract 9.1."""
    with pytest.raises(InvalidInput, match="at most 4096"):
        call(RedisStore(Tripwire(), clock="client"), long)


def test_an_events_keys_may_come_to_64_kib_with_what_their_entries_repeat():
    """Each key counts its namespace, value, and the kind, source and id its index
    entries repeat (a wait's: kind, run, effect, sender): 64 KiB in all, not a byte more."""
    per_key = MAX_KEY_BYTES // 64  # 1024: kind, source and id of 100 bytes, ns and value
    ns = "n" * (per_key - 300 - 362)

    def event(extra: int) -> InboundEvent:
        correlation = tuple(
            CorrelationKey(ns, f"{i:0{362 + (extra if i == 0 else 0)}d}") for i in range(64)
        )
        return InboundEvent("s" * 100, "i" * 100, "k" * 100, None, correlation)

    assert len(codec.event_args(event(0), 1 << 20)) == 6 + 128
    with pytest.raises(InvalidInput, match="come to 65537 bytes"):
        codec.event_args(event(1), 1 << 20)
    sub = Subscription("r" * 100, "e" * 100, "k" * 100, event(0).correlation)
    with pytest.raises(InvalidInput, match="the wait's 64 correlation keys"):
        codec.subscription_args(
            Subscription(sub.run, sub.effect, sub.kind, sub.correlation, from_source="x")
        )
    assert codec.subscription_args(sub)[0] == sub.run


def test_every_store_refuses_past_the_bounds_before_io(make, raw):
    """On every backend, sync and async: a long identifier, too many keys, and keys too
    many bytes in all are refused, and nothing reaches the tenant's keys."""
    store = make()
    many = keys(*[f"k/{i}" for i in range(65)])
    wide = keys(*[f"{'n' * 1100}/{i}" for i in range(64)])  # 64 keys, past 64 KiB in all
    for call in (
        lambda: store.events.buffer(ev(LONG, "k/1"), at=at(0)),
        lambda: store.events.deliver(InboundEvent("s", "e", "k", None, many), at=at(0)),
        lambda: store.events.wait(Subscription("r", "w", "k", wide), at=at(0)),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert store.events.stats().live == 0
    assert store.events.stats().waits == 0


def test_identifiers_at_their_length_are_stored_and_read_back(store):
    """An event, a wait and a timer whose identifiers are all 4 KiB live their lives."""
    x = "é" * (MAX_ID_BYTES // 2)
    event = InboundEvent(x, x, x, {"a": 1}, keys(*[f"{x[:-1]}{i}/{x}" for i in range(3)]))
    assert store.events.buffer(event, at=at(0)) is True
    claimed = store.events.wait(Subscription(x, x, x, event.correlation[:1]), at=at(1))
    assert claimed.event == event
    store.events.unsubscribe(x, x)
    assert store.timers.arm(Timer(x, x, at(0)))
    assert [t.effect for t in store.timers.claim_due(now=at(0))] == [x]


def test_correlation_keys_past_the_stores_limit_are_refused_before_io():
    """At most max_correlation_keys distinct keys (default 64) per event or wait."""
    store = RedisStore(Tripwire(), clock="client")
    many = keys(*[f"k/{i}" for i in range(65)])
    for call in (
        lambda: store.events.buffer(InboundEvent("s", "e", "k", None, many)),
        lambda: store.events.deliver_to("r", InboundEvent("s", "e", "k", None, many)),
        lambda: store.events.wait(Subscription("r", "w", "k", many)),
        lambda: store.events.park_wait(Subscription("r", "w", "k", many)),
    ):
        with pytest.raises(InvalidInput, match="max_correlation_keys"):
            call()
    doubled = many[:64] + many[:64]  # 64 distinct keys, given twice: accepted
    assert codec.correlation(doubled, required=True) == [("k", str(i)) for i in range(64)]


@pytest.mark.parametrize("value", [0, 1025, True, 2.0, "64"])
def test_max_correlation_keys_is_an_int_from_1_to_1024(value):
    with pytest.raises(InvalidInput, match="max_correlation_keys"):
        RedisStore(Tripwire(), max_correlation_keys=value)


def test_a_store_may_allow_more_keys(make):
    """max_correlation_keys=200: an event with 200 keys is stored and matched by each."""
    store = make(max_correlation_keys=200)
    many = keys(*[f"k/{i}" for i in range(200)])
    assert store.events.buffer(InboundEvent("s", "e", "paid", None, many), at=at(0))
    got = store.events.wait(sub("r", "w", "k/199"), at=at(1)).event.correlation
    assert sorted(got, key=lambda k: k.value) == sorted(many, key=lambda k: k.value)


def test_the_scripts_refuse_more_keys_than_any_store_may_send(raw):
    """Sent straight to the server (FCALL by hand, past the store's validation), an
    event with more than 1,024 keys is refused by the script before it writes."""
    store = RedisStore(raw, tenant="acme")
    driver = store._driver
    pairs = [part for i in range(MAX_KEYS_LIMIT + 1) for part in ("k", str(i))]
    call = driver.ctx.call("buffer", ["", "s", "e", "paid", "null", "", "", *pairs])
    with pytest.raises(InvalidInput, match="more than 1024 correlation keys"):
        codec.check_status(driver.execute(call))
    assert store.events.stats().live == 0
    listing = driver.ctx.call("pending", [10**9])  # a listing step of any size: bounded
    assert codec.check_status(driver.execute(listing)) == "OK"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is new in 3.11")
def test_a_cancellation_a_step_swallowed_stops_the_method_at_the_next_step():
    """A cancellation that one step swallows (as redis-py's asyncio.wait_for may) stops
    a multi-step method before its next step, instead of letting it run to its end."""
    import asyncio
    import contextlib

    import fakeredis

    from agentplane_redis import AsyncRedisStore

    async def go() -> int:
        store = AsyncRedisStore(fakeredis.FakeAsyncRedis(), tenant="acme")
        for i in range(30):
            await store.events.buffer(ev(f"e{i}", "k/1"), at=at(0))
        real = store._driver.execute
        steps = 0

        async def swallowing(call: Any, *more: Any) -> Any:
            nonlocal steps
            reply = await real(call, *more)
            if call.script == "sweep_unclaimed":
                steps += 1
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):  # arrives, is swallowed
                    await asyncio.sleep(0)
            return reply

        store._driver.execute = swallowing  # type: ignore[method-assign]
        with pytest.raises(asyncio.CancelledError):
            await store.events.sweep_unclaimed(at(10))
        return steps

    assert asyncio.run(go()) == 1


@pytest.mark.parametrize(
    "options",
    [
        {"clock": "local"},
        {"durability": "sometimes"},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": 512 * 1024 * 1024 + 1},
        {"max_payload_bytes": True},
        {"timer_lease": 0},
        {"timer_lease": timedelta(0)},
        {"timer_lease": "60"},
        {"timer_lease": timedelta(days=10**8)},
        {"timer_lease": timedelta.max},
        {"timer_lease": 10**13},
    ],
)
def test_bad_options_are_refused(options):
    """Constructor options are validated before the store exists."""
    with pytest.raises(InvalidInput):
        RedisStore(Tripwire(), **options)


def test_payload_size_counts_utf8_bytes_of_compact_json():
    """The limit applies to compact JSON in UTF-8, non-ASCII kept."""
    store = RedisStore(Tripwire(), max_payload_bytes=6)
    with pytest.raises(InvalidInput):
        store.events.buffer(ev("e", payload="ééé"), at=at(0))  # "ééé" is 8 bytes


def test_payload_at_the_limit_is_accepted_and_read_back(make):
    """A payload of exactly max_payload_bytes is stored and read back; one byte more is not."""
    payload = {"a": [1, 2.5, None, True, "ü"]}
    size = len('{"a":[1,2.5,null,true,"ü"]}'.encode())
    store = make("acme", max_payload_bytes=size)
    store.events.buffer(ev("e", "k/1", payload=payload), at=at(0))
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(1)).event.payload == payload
    with pytest.raises(InvalidInput):
        store.events.buffer(ev("f", "k/1", payload={**payload, "b": 1}), at=at(0))


def test_instants_at_both_ends_of_the_range_are_stored_and_read_back(store):
    """The first and last millisecond a UTC datetime holds are accepted, and every
    operation that later reads such a row still can (contract 2.2)."""
    last = LAST.replace(microsecond=999_000)
    assert store.timers.arm(Timer("R", "last", LAST))
    assert store.timers.arm(Timer("R", "first", FIRST))
    assert [t.fire_at for t in store.timers.armed("R")] == [FIRST, last]
    assert store.timers.next_due() == FIRST
    assert [t.effect for t in store.timers.pending()] == ["first", "last"]
    lease = timedelta(days=365)
    claimed = store.timers.claim_due(now=LAST - lease, lease=lease)
    assert [t.effect for t in claimed] == ["first"]
    assert store.events.buffer(ev("old", "k/1"), at=FIRST)
    assert store.events.buffer(ev("new", "k/1"), at=LAST)
    got = store.events.claim_for(sub("r", "w", "k/1"), at=LAST)
    assert got is not None
    assert (got.event.id, got.received_at) == ("old", FIRST)
    assert store.events.minter("src", "new") is not None
    assert store.events.erase_payload("src", "old")
    assert store.events.sweep_unclaimed(LAST) == 1
    assert [d.event.id for d in store.events.dead_letters()] == ["new", "old"]
    closed = store.runs.close("R")
    assert closed.timers == 2


def test_an_aware_instant_converts_to_utc_before_the_range_check(store):
    """datetime.max at UTC-5 is refused, but an instant near the end east of UTC is fine."""
    east = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=5)))
    assert store.timers.arm(Timer("R", "east", east))
    assert store.timers.armed("R")[0].fire_at == east
    with pytest.raises(InvalidInput):
        store.timers.arm(Timer("R", "west", PAST_END))


def test_the_longest_lease_is_accepted(make):
    """A lease of MAX_LEASE (365 days) is accepted as an option and per call."""
    store = make("acme", timer_lease=timedelta(days=365))
    store.timers.arm(timer("r", "t", 0))
    assert len(store.timers.claim_due(now=at(0))) == 1
    assert store.timers.claim_due(now=at(0) + timedelta(days=365) - timedelta(milliseconds=1)) == []
    assert len(store.timers.claim_due(now=at(0) + timedelta(days=365))) == 1


def test_a_limit_of_sys_maxsize_means_all(store):
    """Listings and loops take any int limit; sys.maxsize returns everything."""
    for n in range(3):
        store.events.buffer(ev(f"e{n}", "k/1"), at=at(n))
        store.events.subscribe(sub("r", f"w{n}", "k/2"), at=at(n))
        store.timers.arm(timer("r", f"t{n}", n))
    store.events.park_wait(sub("p", "w", "k/9"), at=at(0))
    assert len(store.events.waiting(sys.maxsize)) == 4
    assert len(store.timers.pending(sys.maxsize)) == 3
    assert len(store.events.parked_waits(sys.maxsize)) == 1
    assert store.events.sweep_unclaimed(at(10)) == 3
    assert len(store.events.dead_letters(sys.maxsize)) == 3
    assert store.events.purge(at(10), limit=sys.maxsize) == 3
    assert len(store.timers.claim_due(now=at(10), limit=sys.maxsize)) == 3


def test_deep_and_large_payloads_that_json_reads_back_are_accepted(store):
    """Nesting and integer sizes within what json encodes and decodes are stored intact."""
    deep, big = _nested(150), {"n": 10**4000, "neg": -(10**4000)}
    store.events.buffer(ev("deep", "k/1", payload=deep), at=at(0))
    store.events.buffer(ev("big", "k/2", payload=big), at=at(0))
    assert store.events.claim_for(sub("r", "a", "k/1"), at=at(1)).event.payload == deep
    assert store.events.claim_for(sub("r", "b", "k/2"), at=at(1)).event.payload == big


def test_many_correlation_keys_collapse_in_first_given_order():
    """Duplicates collapse (linear time), first-given order kept."""
    from agentplane_redis import codec

    keys = [CorrelationKey("n", str(i % 1000)) for i in range(20_000)]
    collapsed = codec.correlation(keys, required=True, limit=1000)
    assert collapsed == [("n", str(i)) for i in range(1000)]


# ---------------------------------------------------------------- the fast paths


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(timezones=st.just(timezone.utc)),
    st.integers(min_value=-23 * 60, max_value=23 * 60),
)
def test_a_utc_instant_reads_as_the_same_instant_in_any_zone(moment, minutes):
    """A UTC datetime (read without its offset) and the same moment in another zone
    (read through it) give the same milliseconds, or are refused alike."""
    zone = timezone(timedelta(minutes=minutes))
    try:
        elsewhere = moment.astimezone(zone)
    except OverflowError:  # the moment has no representation in that zone
        return
    try:
        ms = codec.instant("at", moment)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            codec.instant("at", elsewhere)
        return
    assert codec.instant("at", elsewhere) == ms
    assert codec.to_datetime(ms) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text()),
        max_size=8,
    )
)
def test_a_flat_payload_is_encoded_as_the_general_walk_encodes_it(payload):
    """A flat payload skips the walk; its text, and its refusal (a lone surrogate),
    are what the walk and json.dumps give."""
    assert codec._flat(payload)
    try:
        general = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        general.encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        with pytest.raises(InvalidInput):
            codec.payload_text(payload, 10**9)
        return
    assert codec._check_json(payload) == 1
    assert codec.payload_text(payload, 10**9) == general


@pytest.mark.parametrize(
    "payload",
    [{1: "a"}, {"a": 1.5}, {"a": [1]}, {"a": {"b": 1}}, {"a": math.nan}, {None: 1}],
)
def test_a_payload_that_is_not_flat_is_walked(payload):
    assert not codec._flat(payload)


def test_an_identifier_that_is_not_ascii_is_still_checked():
    """The ASCII shortcut leaves other strings to the full check."""
    assert codec.ident("id", "évt") == "évt"
    with pytest.raises(InvalidInput):
        codec.ident("id", LONE)
    with pytest.raises(InvalidInput):
        codec.ident("id", "")

    class Named(str):
        pass

    assert codec.ident("id", Named("e1")) == "e1"
