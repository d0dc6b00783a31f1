"""The worker (agentplane_redis.worker): its pass over fakeredis, in both flavours, and
real worker processes on a real server."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from worker_procs import run_worker

from agentplane_redis import InvalidInput, RedisStore, Timer
from agentplane_redis.metrics import WorkerMetrics, registry_for
from agentplane_redis.testing import fake_async_store, fake_server, fake_store
from agentplane_redis.worker import AsyncWorker, Worker

from helpers import ev, sub

SPAWN = multiprocessing.get_context("spawn")


def now() -> datetime:
    return datetime.now(timezone.utc)


def past(seconds: float) -> datetime:
    return now() - timedelta(seconds=seconds)


def test_a_pass_hands_over_due_timers_and_disarms_what_returned():
    """Due timers go to on_timer; returned ones are disarmed, failed ones stay claimed."""
    store = fake_store("acme")
    for n in range(5):
        store.timers.arm(Timer("r", f"t{n}", past(1)))
    store.timers.arm(Timer("r", "later", now() + timedelta(hours=1)))
    seen = []

    def on_timer(s: Any, timer: Timer) -> None:
        seen.append(timer.effect)
        if timer.effect == "t3":
            raise RuntimeError("journal down")

    report = Worker(store, on_timer=on_timer, lease=timedelta(seconds=30)).run_once()
    assert sorted(seen) == ["t0", "t1", "t2", "t3", "t4"]
    assert (report.claimed, report.handled, report.failed) == (5, 4, 1)
    assert [t.effect for t in store.timers.pending()] == ["t3", "later"]
    # t3 stays claimed: not handed out again inside its lease.
    assert Worker(store, on_timer=on_timer).run_once().claimed == 0
    assert 0 < report.sleep <= 1.0


def test_a_pass_redelivers_parked_waits_sweeps_and_purges():
    """on_redelivery gets each parked wait with its event; sweep and purge when set."""
    store = fake_store("acme")
    store.events.buffer(ev("e1", "k/1"), at=past(10))
    store.events.wait(sub("r", "w", "k/1"), at=past(10))
    store.events.buffer(ev("old", "k/2"), at=past(7200))
    store.events.buffer(ev("dead", "k/3"), at=past(90000))
    store.events.sweep_unclaimed(past(80000))
    got = []
    worker = Worker(
        store,
        on_timer=lambda s, t: None,
        on_redelivery=lambda s, w, e: got.append((w.run, e.event.id)),
        sweep_grace=timedelta(hours=1),
        retention=timedelta(days=1),
    )
    report = worker.run_once()
    assert got == [("r", "e1")]
    assert (report.redelivered, report.swept, report.purged) == (1, 1, 1)
    assert worker.last_success is not None
    assert worker.run_once().redelivered == 0  # not again before redelivery_interval


def test_the_async_worker_runs_coroutines_and_plain_callables():
    """AsyncWorker: the same pass; coroutine and plain handlers, concurrency bounded."""
    server = fake_server()
    fake_store("acme", server=server)
    sync = fake_store("acme", server=server)
    for n in range(6):
        sync.timers.arm(Timer("r", f"t{n}", past(1)))
    running, peak, seen = [0], [0], []

    async def on_timer(s: Any, timer: Timer) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        seen.append(timer.effect)
        running[0] -= 1

    async def go() -> Any:
        store = fake_async_store("acme", server=server)
        return await AsyncWorker(store, on_timer=on_timer, concurrency=3).run_once()

    report = asyncio.run(go())
    assert report.handled == 6
    assert len(seen) == 6
    assert peak[0] == 3
    assert sync.timers.pending_count() == 0


def test_settings_are_validated():
    """Bad settings are InvalidInput at construction."""
    store = fake_store()
    for bad in (
        {"batch": 0},
        {"concurrency": 0},
        {"poll_interval": 0},
        {"lease": 5},
        {"retention": 3},
    ):
        with pytest.raises(InvalidInput):
            Worker(store, on_timer=lambda s, t: None, **bad)
    with pytest.raises(InvalidInput):
        Worker([], on_timer=lambda s, t: None)


def test_worker_metrics_are_scraped_and_parsed():
    """The collector and the worker's counters, parsed by the Prometheus client's parser."""
    store = fake_store("acme")
    store.timers.arm(Timer("r", "t", past(5)))
    store.timers.arm(Timer("r", "u", past(3)))
    store.events.buffer(ev("e1", "k/1"), at=past(42))
    metrics = WorkerMetrics()
    Worker(store, on_timer=lambda s, t: None, batch=1, metrics=metrics).run_once()
    text = generate_latest(registry_for([store], metrics)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    tenant = (("tenant", "acme"),)
    assert samples[("agentplane_up", tenant)] == 1
    assert samples[("agentplane_events", (("state", "live"), ("tenant", "acme")))] == 1
    assert samples[("agentplane_timers_pending", tenant)] == 1
    assert samples[("agentplane_timers_overdue_seconds", tenant)] >= 2
    assert samples[("agentplane_oldest_live_event_age_seconds", tenant)] >= 41
    assert samples[("agentplane_worker_timers_claimed_total", ())] == 1
    assert (
        samples[("agentplane_worker_handler_calls_total", (("kind", "timer"), ("outcome", "ok")))]
        == 1
    )
    assert samples[("agentplane_worker_handler_seconds_count", (("kind", "timer"),))] == 1


# ---------------------------------------------------------------- real processes


def read(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def spawn(*args: Any, **kwargs: Any) -> Any:
    p = SPAWN.Process(target=run_worker, args=args, kwargs=kwargs)
    p.start()
    return p


def arm(url: str, tenant: str, count: int, prefix: str = "t") -> None:
    store = RedisStore.from_url(url, tenant=tenant)
    for n in range(count):
        store.timers.arm(Timer(f"run{n % 13}", f"{prefix}{n}", past(1)))


@pytest.mark.real
def test_workers_share_a_backlog_and_handle_each_timer_once(start, tmp_path):
    """Three worker processes, 300 due timers: each handled exactly once."""
    server = start("valkey")
    arm(server.url, "acme", 300)
    log = tmp_path / "log.jsonl"
    workers = [
        spawn(server.url, ["acme"], f"w{i}", str(log), 30_000, handler_s=0.002) for i in range(3)
    ]
    wait_for(lambda: sum(e["event"] == "done" for e in read(log)) >= 300)
    wait_for(lambda: RedisStore.from_url(server.url, tenant="acme").timers.pending_count() == 0)
    for w in workers:
        os.kill(w.pid, signal.SIGTERM)
        w.join(30)
        assert w.exitcode == 0
    done = Counter(e["effect"] for e in read(log) if e["event"] == "done")
    assert len(done) == 300
    assert max(done.values()) == 1
    assert len({e["worker"] for e in read(log) if e["event"] == "done"}) > 1


@pytest.mark.real
def test_a_worker_killed_mid_handler_has_its_timer_redone_elsewhere_after_the_lease(
    start, tmp_path
):
    """SIGKILL while handling: nobody else takes the timer inside its lease; after it,
    another worker handles it, once."""
    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="acme")
    store.timers.arm(Timer("r", "slow", past(1)))
    log, lease_ms = tmp_path / "log.jsonl", 2000
    victim = spawn(server.url, ["acme"], "victim", str(log), lease_ms, slow="slow")
    wait_for(lambda: any(e["event"] == "start" for e in read(log)))
    claimed_at = read(log)[0]["at"]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(30)
    rescuer = spawn(server.url, ["acme"], "rescuer", str(log), lease_ms)
    wait_for(lambda: any(e["event"] == "done" for e in read(log)))
    done = [e for e in read(log) if e["event"] == "done"]
    assert [d["worker"] for d in done] == ["rescuer"]
    assert done[0]["at"] >= claimed_at + lease_ms / 1000 - 0.05
    os.kill(rescuer.pid, signal.SIGTERM)
    rescuer.join(30)
    assert rescuer.exitcode == 0
    assert store.timers.pending_count() == 0


@pytest.mark.real
def test_sigterm_finishes_the_handler_in_hand_and_claims_nothing_new(start, tmp_path):
    """SIGTERM mid-handler: the handler completes, its timer is disarmed, the process
    exits 0, and the timers still due stay unclaimed."""
    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="acme")
    arm(server.url, "acme", 20)
    log = tmp_path / "log.jsonl"
    worker = spawn(server.url, ["acme"], "w", str(log), 30_000, handler_s=0.5)
    wait_for(lambda: any(e["event"] == "start" for e in read(log)))
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert worker.exitcode == 0
    entries = read(log)
    started = [e["effect"] for e in entries if e["event"] == "start"]
    finished = [e["effect"] for e in entries if e["event"] == "done"]
    assert started == finished
    assert entries[-1]["event"] == "exit"
    assert store.timers.pending_count() == 20 - len(finished)
    # Nothing left claimed: the rest are handed out at once to the next sweeper.
    assert len(store.timers.claim_due(limit=100)) == 20 - len(finished)


@pytest.mark.real
def test_a_server_restart_under_a_running_worker_is_ridden_out(start, tmp_path):
    """kill -9 and restart of the server: the worker backs off, reconnects and handles
    timers armed after the restart, with no operator action."""
    server = start("redis", appendonly=True, extra=("--appendfsync", "always"))
    arm(server.url, "acme", 10)
    log = tmp_path / "log.jsonl"
    worker = spawn(server.url, ["acme"], "w", str(log), 30_000)
    wait_for(lambda: sum(e["event"] == "done" for e in read(log)) == 10)
    server.crash()
    time.sleep(1.0)
    server.restart()
    arm(server.url, "acme", 10, prefix="after")
    wait_for(lambda: sum(e["event"] == "done" for e in read(log)) == 20)
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert worker.exitcode == 0


@pytest.mark.real
def test_one_worker_serves_several_tenants(start, tmp_path):
    """A worker given three tenants' stores handles every tenant's timers, each in its own."""
    server = start("valkey")
    for tenant in ("a", "b", "c"):
        arm(server.url, tenant, 7)
    log = tmp_path / "log.jsonl"
    worker = spawn(server.url, ["a", "b", "c"], "w", str(log), 30_000)
    wait_for(lambda: sum(e["event"] == "done" for e in read(log)) == 21)
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert Counter(e["tenant"] for e in read(log) if e["event"] == "done") == {
        "a": 7,
        "b": 7,
        "c": 7,
    }
    client = redis.Redis.from_url(server.url)
    assert all(RedisStore(client, tenant=t).timers.pending_count() == 0 for t in "abc")


def test_the_metrics_endpoint_is_scraped_over_http():
    """serve() exposes /metrics; the Prometheus parser reads the scrape."""
    import socket
    import urllib.request

    from agentplane_redis.metrics import serve

    store = fake_store("acme")
    store.timers.arm(Timer("r", "t", past(1)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = serve([store], port)
    try:
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
    finally:
        server.shutdown()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"agentplane_up", "agentplane_timers_pending", "agentplane_events"} <= names


def test_a_handler_outliving_most_of_its_lease_is_logged_loudly(caplog):
    """A handler still running at 80% of its lease: CRITICAL, naming the run and effect."""
    store = fake_store("acme")
    store.timers.arm(Timer("slow-run", "slow", past(1)))
    worker = Worker(store, on_timer=lambda s, t: time.sleep(0.4), lease=timedelta(milliseconds=200))
    with caplog.at_level("CRITICAL", logger="agentplane_redis.worker"):
        worker.run_once()
    assert any("slow-run" in r.getMessage() and r.levelname == "CRITICAL" for r in caplog.records)
