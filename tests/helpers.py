"""Builders shared by the tests: instants in milliseconds, events and waits."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from agentplane_redis import CorrelationKey, InboundEvent, Operator, Subscription, Timer

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(ms: int) -> datetime:
    """T0 plus ms milliseconds."""
    return T0 + timedelta(milliseconds=ms)


def keys(*specs: str) -> tuple[CorrelationKey, ...]:
    """("order/A-1", ...) -> correlation keys."""
    out = []
    for spec in specs:
        ns, _, value = spec.partition("/")
        out.append(CorrelationKey(ns, value))
    return tuple(out)


def ev(
    id: str,
    *key_specs: str,
    source: str = "src",
    kind: str = "paid",
    payload: Any = None,
    by: Operator | None = None,
) -> InboundEvent:
    return InboundEvent(
        source, id, kind, payload if payload is not None else {"id": id}, keys(*key_specs), by
    )


def sub(run: str, effect: str, *key_specs: str, kind: str = "paid", **kw: Any) -> Subscription:
    return Subscription(run, effect, kind, keys(*key_specs), **kw)


def paged(page: Any, limit: int, **options: Any) -> list[Any]:
    """Every item of a listing, read ``limit`` at a time from cursor to cursor."""
    out: list[Any] = []
    after = None
    for _ in range(1000):
        items, after = page(limit, after, **options)
        assert len(items) <= limit
        out += items
        if after is None:
            return out
    raise AssertionError("a listing that never ends")


def timer(run: str, effect: str, fire_ms: int, **kw: Any) -> Timer:
    return Timer(run, effect, at(fire_ms), **kw)


def data(raw: Any) -> dict[bytes, Any]:
    """A tenant's data as stored: every key's dump, less the call-token bookkeeping
    (replies remembered for lost-reply replays), which is not data."""
    return {k: raw.dump(k) for k in raw.keys("*") if not k.endswith((b":reply", b":reply:order"))}


def ids(items: Any) -> list[Any]:
    """The (run, effect) of waits or timers, or the ids of events, for terse asserts."""
    out: list[Any] = []
    for x in items:
        if hasattr(x, "run"):
            out.append((x.run, x.effect))
        elif hasattr(x, "event"):
            out.append(x.event.id)
        else:
            out.append(x.id)
    return out
