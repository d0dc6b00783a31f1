"""Real OS processes racing on one real server (Redis 7 and Valkey 8)."""

from __future__ import annotations

import multiprocessing
import queue
from collections import Counter
from typing import Any

import pytest

from agentplane_redis import RedisStore

from helpers import at, sub
from workers import (
    arm_backlog,
    buffer_same_pairs,
    claim_then_die,
    deliver_distinct,
    deliver_events,
    register_waits,
    sweep_timers,
)

pytestmark = pytest.mark.real
SPAWN = multiprocessing.get_context("spawn")
REAL = ["redis7", "valkey8"]


def run_all(targets: list[tuple[Any, tuple[Any, ...]]], out: Any) -> list[Any]:
    """Runs the workers, released together by a barrier once all have started."""
    start = SPAWN.Barrier(len(targets))
    procs = [SPAWN.Process(target=t, args=(*a, start, out)) for t, a in targets]
    for p in procs:
        p.start()
    results, done = [], 0
    while done < len(procs):
        try:
            item = out.get(timeout=120)
        except queue.Empty:
            pytest.fail("a worker process hung")
        if item[0] == "done":
            done += 1
        else:
            results.append(item)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    return results


@pytest.fixture(params=REAL)
def url(request: pytest.FixtureRequest, servers: Any) -> str:
    if request.param not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{request.param} not selected")
    return servers.get(request.param).url


def test_racing_events_and_waits_pair_exactly_once(url):
    """4 processes race buffer+match_waiter against subscribe+claim_for on shared keys:
    no event is claimed twice, no wait holds two events, and every pair meets."""
    tenant, per = "race", 60
    out = SPAWN.Queue()
    results = run_all(
        [
            (deliver_events, (url, tenant, "p1", per)),
            (deliver_events, (url, tenant, "p2", per)),
            (register_waits, (url, tenant, "r1", per)),
            (register_waits, (url, tenant, "r2", per)),
        ],
        out,
    )
    by_event = {}
    by_wait = {}
    for _, event_id, wait in results:
        assert by_event.setdefault(event_id, wait) == wait, f"{event_id} claimed twice"
        assert by_wait.setdefault(wait, event_id) == event_id, f"{wait} holds two events"
    store = RedisStore.from_url(url, tenant=tenant)
    stats = store.events.stats()
    # The ordering rule: whichever side searched second found the other, so all meet.
    assert len(by_event) == stats.claimed == 2 * per
    assert (stats.live, stats.waits, stats.parked) == (0, 2 * per, 2 * per)
    marks = store.client.hgetall(store.keys.key("marks")).values()
    held = [mark.split(b" ", 1)[1] for mark in marks if b" " in mark]
    assert len(held) == len(set(held)) == 2 * per


@pytest.mark.parametrize("sweepers", [2, 8])
def test_concurrent_sweepers_claim_disjoint_sets_covering_every_due_timer(url, sweepers):
    """N processes claim_due over one backlog: disjoint claims whose union is every due timer."""
    tenant = f"sweep{sweepers}"
    due = arm_backlog(url, tenant, 1500)
    out = SPAWN.Queue()
    results = run_all(
        [(sweep_timers, (url, tenant, f"s{i}", 1000, 60_000, 25)) for i in range(sweepers)],
        out,
    )
    claims = Counter(tid for _, _, tid in results)
    assert max(claims.values()) == 1, "a timer was claimed twice under a live lease"
    assert set(claims) == set(due)
    assert len({name for _, name, _ in results}) > 1, "only one sweeper got any work"
    store = RedisStore.from_url(url, tenant=tenant)
    assert store.timers.pending_count() == len(due) + 1


def test_a_killed_claimants_timers_fire_again_once_after_the_lease(url):
    """A sweeper killed holding claims: nothing re-fires before the lease ends, then
    every timer it held is claimed again exactly once by the surviving sweepers."""
    tenant, lease = "killed", 5_000
    due = arm_backlog(url, tenant, 400)
    out = SPAWN.Queue()
    victim = SPAWN.Process(target=claim_then_die, args=(url, tenant, 1000, lease, out))
    victim.start()
    _, held = out.get(timeout=60)
    victim.join(30)
    assert victim.exitcode == -9
    assert sorted(held) == sorted(due)
    store = RedisStore.from_url(url, tenant=tenant)
    assert store.timers.claim_due(now=at(1000 + lease - 1), limit=1000) == []
    out2 = SPAWN.Queue()
    results = run_all(
        [(sweep_timers, (url, tenant, f"s{i}", 1000 + lease, lease, 20)) for i in range(4)],
        out2,
    )
    claims = Counter(tid for _, _, tid in results)
    assert set(claims) == set(held)
    assert max(claims.values()) == 1


def test_concurrent_buffers_of_one_pair_store_it_once(url):
    """4 processes buffer the same 100 pairs: exactly one True per pair."""
    out = SPAWN.Queue()
    results = run_all([(buffer_same_pairs, (url, "same", f"b{i}", 100)) for i in range(4)], out)
    stored = Counter(event_id for _, event_id, _ in results)
    assert len(stored) == 100
    assert set(stored.values()) == {1}
    assert RedisStore.from_url(url, tenant="same").events.stats().live == 100


def test_distinct_events_racing_for_one_wait_resume_it_once(url):
    """4 processes deliver distinct events for one wait: one wins, the rest stay live."""
    store = RedisStore.from_url(url, tenant="one-wait")
    store.events.subscribe(sub("run", "only", "order/Z"), at=at(0))
    out = SPAWN.Queue()
    results = run_all([(deliver_distinct, (url, "one-wait", f"d{i}", 25)) for i in range(4)], out)
    assert len(results) == 1
    stats = store.events.stats()
    assert (stats.claimed, stats.live, stats.parked) == (1, 99, 1)
    assert store.events.claim_for(sub("run", "only", "order/Z"), at=at(1)).event.id == results[0][1]
