"""Refused input (contract 9.1): InvalidInput before any command reaches Redis."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest

from agentplane_redis import (
    CorrelationKey,
    InboundEvent,
    InvalidInput,
    Operator,
    RedisStore,
    Subscription,
    Timer,
)

from helpers import at, ev, sub, timer

NAIVE = datetime(2026, 1, 1)
LONE = "\ud800"


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
        ("pending-limit", lambda s: s.timers.pending(-1)),
        ("armed-empty", lambda s: s.timers.armed("")),
        ("arm-naive", lambda s: s.timers.arm(timer("r", "w", 0).__class__("r", "w", NAIVE))),
    ]
    return out


CASES = cases()


class Tripwire:
    """A client that fails the test if any command is sent."""

    def register_script(self, source: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a command reached the server")

        return call

    def __getattr__(self, name: str) -> Any:
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
    before = {k: raw.dump(k) for k in raw.keys("*")}
    for name, call in CASES:
        with pytest.raises(InvalidInput):
            call(store)
        assert {k: raw.dump(k) for k in raw.keys("*")} == before, name


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
        LONE,
        7,
        None,
    ],
)
def test_bad_tenants_are_refused(tenant):
    """Tenants: trimmed, 1-64 bytes of UTF-8, no control character, none of / : { }."""
    with pytest.raises(InvalidInput):
        RedisStore(Tripwire(), tenant=tenant)


def test_good_tenants_are_accepted():
    """64 bytes, non-ASCII and spaces inside are fine; outer space is trimmed."""
    assert RedisStore(Tripwire(), tenant="a" * 64).tenant == "a" * 64
    assert RedisStore(Tripwire(), tenant=" zürich west ").tenant == "zürich west"


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
