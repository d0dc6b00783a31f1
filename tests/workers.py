"""Worker processes for the concurrency tests: each opens its own connection."""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any

from agentplane_redis import RedisStore

from helpers import at, ev, sub, timer


def deliver_events(url: str, tenant: str, name: str, count: int, start: Any, out: Any) -> None:
    """Stores events, then looks for a waiter for each (buffer, then match_waiter)."""
    store = RedisStore.from_url(url, tenant=tenant)
    start.wait()
    for n in range(count):
        event = ev(f"{name}-{n}", "order/A-1", "order/B-2")
        store.events.buffer(event, at=at(n))
        won = store.events.match_waiter(event, at=at(n))
        if won is not None:
            out.put(("event", event.id, (won.run, won.effect)))
    out.put(("done", name, None))


def register_waits(url: str, tenant: str, name: str, count: int, start: Any, out: Any) -> None:
    """Registers waits, then claims for each (subscribe, then claim_for), and retries."""
    store = RedisStore.from_url(url, tenant=tenant)
    start.wait()
    for n in range(count):
        wait = sub(name, f"w{n}", "order/B-2", "order/A-1")
        store.events.subscribe(wait, at=at(n))
        got = store.events.claim_for(wait, at=at(n))
        if got is not None:
            out.put(("wait", got.event.id, (wait.run, wait.effect)))
            # A retry recovers the same claim, never a second event.
            again = store.events.claim_for(wait, at=at(n))
            assert again is not None
            assert again.event.id == got.event.id
    out.put(("done", name, None))


def sweep_timers(
    url: str, tenant: str, name: str, now_ms: int, lease_ms: int, limit: int, start: Any, out: Any
) -> None:
    """Claims due timers in pages until none are left, reporting each claim."""
    store = RedisStore.from_url(url, tenant=tenant)
    start.wait()
    while True:
        page = store.timers.claim_due(
            now=at(now_ms), limit=limit, lease=timedelta(milliseconds=lease_ms)
        )
        for t in page:
            out.put(("timer", name, (t.run, t.effect)))
        if not page:
            break
    out.put(("done", name, None))


def claim_then_die(url: str, tenant: str, now_ms: int, lease_ms: int, out: Any) -> None:
    """Claims every due timer, reports them, then dies without disarming (SIGKILL)."""
    store = RedisStore.from_url(url, tenant=tenant)
    page = store.timers.claim_due(
        now=at(now_ms), limit=10_000, lease=timedelta(milliseconds=lease_ms)
    )
    out.put(("held", [(t.run, t.effect) for t in page]))
    out.close()
    out.join_thread()  # the report must leave before the process dies
    os.kill(os.getpid(), signal.SIGKILL)


def arm_backlog(url: str, tenant: str, count: int) -> list[tuple[str, str]]:
    store = RedisStore.from_url(url, tenant=tenant)
    for n in range(count):
        store.timers.arm(timer(f"run{n % 37}", f"t{n}", n % 500))
    store.timers.arm(timer("future", "t", 10**9))
    return [(f"run{n % 37}", f"t{n}") for n in range(count)]


def buffer_same_pairs(url: str, tenant: str, name: str, count: int, start: Any, out: Any) -> None:
    """Buffers the same pairs as every other worker; reports the ones it stored."""
    store = RedisStore.from_url(url, tenant=tenant)
    start.wait()
    for n in range(count):
        if store.events.buffer(ev(f"same-{n}", "k/1"), at=at(n)):
            out.put(("stored", f"same-{n}", name))
    out.put(("done", name, None))


def deliver_distinct(url: str, tenant: str, name: str, count: int, start: Any, out: Any) -> None:
    """Delivers distinct events that all match one wait; reports any that resumed it."""
    store = RedisStore.from_url(url, tenant=tenant)
    start.wait()
    for n in range(count):
        outcome = store.events.deliver(ev(f"{name}-{n}", "order/Z"), at=at(n))
        if hasattr(outcome, "subscription"):
            out.put(("resumed", f"{name}-{n}", name))
    out.put(("done", name, None))
