"""The worker (agentplane_redis.worker): its pass over fakeredis, in both flavours, and
real worker processes on a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import threading
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

from agentplane_redis import AsyncRedisStore, InvalidInput, RedisStore, Timer
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
    """Due timers go to on_timer; returned ones are disarmed, a failed one fires again
    after its backoff (retry_delay), not its lease."""
    store = fake_store("acme")
    for n in range(5):
        store.timers.arm(Timer("r", f"t{n}", past(1)))
    store.timers.arm(Timer("r", "later", now() + timedelta(hours=1)))
    seen = []

    def on_timer(s: Any, timer: Timer) -> None:
        seen.append(timer.effect)
        if timer.effect == "t3":
            raise RuntimeError("journal down")

    worker = Worker(store, on_timer=on_timer, lease=timedelta(seconds=30), retry_delay=5)
    report = worker.run_once()
    assert sorted(seen) == ["t0", "t1", "t2", "t3", "t4"]
    assert (report.claimed, report.handled, report.failed) == (5, 4, 1)
    assert [t.effect for t in store.timers.pending()] == ["t3", "later"]
    # t3 fires again in 5 s (its first retry), well before its 30 s lease would lapse.
    assert now() + timedelta(seconds=4) < store.timers.pending()[0].fire_at < past(-5)
    assert Worker(store, on_timer=on_timer).run_once().claimed == 0
    assert 4 < report.sleep <= 5
    assert store.timers.lookup("r", "t3").claims == 1


def test_failed_timers_back_off_and_are_given_up_after_max_attempts(caplog):
    """Each failed claim doubles the delay before the next (capped); after
    max_attempts failed claims on_give_up gets the timer and its error, and the
    timer is disarmed. A hook that fails keeps the timer."""
    from agentplane_redis.worker import Settings, retry_delay

    settings = Settings(retry_delay=1.0, max_retry_delay=5.0)
    assert [retry_delay(settings, n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    store = fake_store("acme")
    store.timers.arm(Timer("r", "flaky", past(1)))
    given: list[tuple[str, int, str]] = []
    hook_fails = [True]

    def on_timer(s: Any, timer: Timer) -> None:
        raise RuntimeError(f"attempt {timer.attempt}")

    def on_give_up(s: Any, timer: Timer, error: BaseException) -> None:
        if hook_fails[0]:
            hook_fails[0] = False
            raise OSError("journal down")
        given.append((timer.effect, timer.attempt, str(error)))

    worker = Worker(
        store, on_timer=on_timer, on_give_up=on_give_up, max_attempts=2, retry_delay=0.001
    )
    for _ in range(50):
        report = worker.run_once()
        if given:
            break
        time.sleep(0.01)
    assert given == [("flaky", 3, "attempt 3")]  # the hook failed once: one claim more
    assert report.gave_up == 1
    assert store.timers.pending() == []
    assert "gave up on timer ('r', 'flaky')" in caplog.text
    assert "claim 1; retried in 0.001 s" in caplog.text


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
        {"wake": "yes"},
        {"max_attempts": 0},
        {"retry_delay": 0},
    ):
        with pytest.raises(InvalidInput):
            Worker(store, on_timer=lambda s, t: None, **bad)
    with pytest.raises(InvalidInput):
        Worker([], on_timer=lambda s, t: None)


def test_handlers_are_checked_when_the_worker_is_made():
    """A handler that cannot take (store, timer) or (store, subscription, event) is
    refused at construction, not when the first timer fires."""
    store = fake_store()
    with pytest.raises(InvalidInput, match="on_timer"):
        Worker(store, on_timer=lambda timer: None)
    with pytest.raises(InvalidInput, match="on_redelivery"):
        Worker(store, on_timer=lambda s, t: None, on_redelivery=lambda s, w: None)

    async def coroutine(store: Any, timer: Any, *, extra: int = 0) -> None:
        return None

    AsyncWorker(store, on_timer=coroutine)
    Worker(store, on_timer=lambda *args: None, on_redelivery=lambda s, w, e=None: None)


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
    assert samples[("agentplane_worker_timers_claimed_total", tenant)] == 1
    ok = (("kind", "timer"), ("outcome", "ok"), ("tenant", "acme"))
    assert samples[("agentplane_worker_handler_calls_total", ok)] == 1
    assert samples[("agentplane_worker_handler_seconds_count", (("kind", "timer"), *tenant))] == 1
    # The timer fired 5 s late; the lateness histogram has it in its 10 s bucket.
    late = (("le", "10.0"), ("tenant", "acme"))
    assert samples[("agentplane_worker_timer_lateness_seconds_bucket", late)] == 1
    assert samples[("agentplane_worker_timer_lateness_seconds_sum", tenant)] >= 5
    version = next(k for k in samples if k[0] == "agentplane_build_info")
    assert dict(version[1])["library"].startswith("agentplane_")
    assert not [name for name, _ in samples if name.endswith("_created")]


@pytest.mark.real
def test_a_scrape_while_the_server_is_down_answers_within_a_second(start):
    """Eight tenants on a server that has gone away: every tenant reported down, and
    the scrape back well inside Prometheus' 10 s timeout; a scrape during the reads
    left running reports them down at once."""
    server = start("valkey")
    stores = [RedisStore.from_url(server.url, tenant=f"t{n}") for n in range(8)]
    registry = registry_for(stores)
    assert 'agentplane_up{tenant="t7"} 1.0' in generate_latest(registry).decode()
    server.stop()
    started = time.monotonic()
    text = generate_latest(registry).decode()
    first = time.monotonic() - started
    again = generate_latest(registry).decode()
    assert first < 5  # not 8 tenants times the client's retries
    for n in range(8):
        assert f'agentplane_up{{tenant="t{n}"}} 0.0' in text
        assert f'agentplane_up{{tenant="t{n}"}} 0.0' in again


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


# ---------------------------------------------------------------- transient server states


def _errors() -> list[BaseException]:
    """One of each transient state, as the store raises it (mapped, or a plain
    ResponseError where a code reaches the caller unmapped), twice for BUSY."""
    from redis._parsers.base import BaseParser

    from agentplane_redis import LibraryMissing, ServerBusy

    parsed = [
        BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
        for text in (
            "OOM command not allowed when used memory > 'maxmemory'.",
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
        )
    ]
    busy = "BUSY Redis is busy running a script. You can only call SCRIPT KILL."
    return [
        ServerBusy(busy),
        redis.ResponseError(busy),  # the same episode, unmapped
        *parsed,
        LibraryMissing("the Functions library is not loaded"),
        redis.ConnectionError("Connection refused"),
    ]


class _Flaky:
    """A store whose claim_due raises each of ``errors`` in turn, then works."""

    def __init__(self, store: Any, errors: list[BaseException]) -> None:
        self._store, self.events, self.runs = store, store.events, store.runs
        self.timers = self
        self._errors = list(errors)
        self.tenant = store.tenant

    def claim_due(self, *args: Any, **kwargs: Any) -> Any:
        if self._errors:
            error = self._errors.pop(0)
            if asyncio.iscoroutinefunction(type(self._store).check):

                async def raising() -> Any:
                    raise error

                return raising()
            raise error
        return self._store.timers.claim_due(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store.timers, name)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_worker_rides_out_every_transient_server_state(flavour, caplog):
    """BUSY, OOM, READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, a missing
    library and a lost connection: the worker never exits on one, logs each episode
    once (and the recovery), counts each in its metrics, and then fires the timer."""
    server = fake_server()
    store = fake_store(server=server) if flavour == "sync" else fake_async_store(server=server)
    fake_store(server=server).timers.arm(Timer("r", "t", past(1)))
    fired: list[str] = []
    metrics = WorkerMetrics()
    errors = _errors()
    options: dict[str, Any] = {"metrics": metrics, "max_backoff": 0.01, "poll_interval": 0.01}
    if flavour == "sync":
        worker: Any = Worker(
            _Flaky(store, errors), on_timer=lambda s, t: fired.append(t.effect), **options
        )
        runner = threading.Thread(target=worker.run)
        with caplog.at_level("DEBUG", logger="agentplane_redis.worker"):
            runner.start()
            wait_for(lambda: fired == ["t"])
            worker.stop()
            runner.join(10)
    else:

        async def handle(s: Any, t: Timer) -> None:
            fired.append(t.effect)

        worker = AsyncWorker(_Flaky(store, errors), on_timer=handle, **options)

        async def go() -> None:
            task = asyncio.create_task(worker.run())
            while fired != ["t"]:
                await asyncio.sleep(0.01)
            worker.stop()
            await task

        with caplog.at_level("DEBUG", logger="agentplane_redis.worker"):
            asyncio.run(asyncio.wait_for(go(), 30))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    outages = [m for m in warnings if m.startswith("the server is ")]
    assert len(outages) == len(_errors()) - 1  # the unmapped BUSY was the same episode
    assert all("claims nothing until it answers" in m for m in outages)
    assert [m for m in warnings if "answers again" in m] != []
    text = generate_latest(metrics.registry).decode()
    for label in ("busy", "oom", "readonly", "loading", "masterdown", "clusterdown"):
        assert f'agentplane_worker_server_errors_total{{state="{label}"}}' in text
    assert 'agentplane_worker_server_errors_total{state="busy"} 2.0' in text


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_worker_stops_on_what_is_not_transient(flavour):
    """A corrupt row or a refused grant is not waited out: run() raises it."""
    from agentplane_redis import CorruptRow

    store = fake_store() if flavour == "sync" else fake_async_store()
    for error in (CorruptRow("timer x", "bad"), redis.exceptions.NoPermissionError("NOPERM")):
        worker: Any = (Worker if flavour == "sync" else AsyncWorker)(
            _Flaky(store, [error]), on_timer=lambda s, t: None, max_backoff=0.01
        )
        run = worker.run if flavour == "sync" else lambda w=worker: asyncio.run(w.run())
        with pytest.raises(type(error)):
            run()


def _busy(url: str) -> threading.Thread:
    """Another client's script that loops until SCRIPT KILL: the server answers BUSY."""

    def loop() -> None:
        with contextlib.suppress(redis.ResponseError):  # "Script killed by user"
            redis.Redis.from_url(url).eval("local i = 0 while true do i = i + 1 end", 0)

    blocker = threading.Thread(target=loop)
    blocker.start()
    time.sleep(0.2)
    return blocker


@pytest.mark.real
@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_a_worker_rides_out_a_busy_server(start, kind, flavour):
    """Another client's long script answers the worker BUSY for a while: the worker
    waits it out and fires the timer once the script is killed."""
    server = start(kind, extra=("--busy-reply-threshold", "50"))
    admin = redis.Redis.from_url(server.url)
    RedisStore.from_url(server.url, tenant="acme").timers.arm(Timer("r", "t", past(1)))
    fired: list[str] = []
    options: dict[str, Any] = {"max_backoff": 0.05, "poll_interval": 0.02}
    if flavour == "sync":
        store = RedisStore.from_url(server.url, tenant="acme")
        worker: Any = Worker(store, on_timer=lambda s, t: fired.append(t.effect), **options)
        blocker = _busy(server.url)
        runner = threading.Thread(target=worker.run)
        runner.start()
        time.sleep(0.5)
        assert fired == []
        assert runner.is_alive()
        admin.script_kill()
        wait_for(lambda: fired == ["t"])
        worker.stop()
        runner.join(10)
    else:

        async def handle(s: Any, t: Timer) -> None:
            fired.append(t.effect)

        async def go() -> threading.Thread:
            astore = await AsyncRedisStore.connect(server.url, tenant="acme")
            worker = AsyncWorker(astore, on_timer=handle, **options)
            blocker = _busy(server.url)
            task = asyncio.create_task(worker.run())
            await asyncio.sleep(0.5)
            assert fired == []
            assert not task.done()
            admin.script_kill()
            while fired != ["t"]:
                await asyncio.sleep(0.02)
            worker.stop()
            await task
            await astore.close_connection()
            return blocker

        blocker = asyncio.run(asyncio.wait_for(go(), 30))
    blocker.join(10)


# ---------------------------------------------------------------- wake-ups


def _soon(ms: int) -> datetime:
    return now() + timedelta(milliseconds=ms)


@pytest.mark.real
def test_an_idle_worker_process_wakes_for_a_timer_armed_before_its_next_poll(start, tmp_path):
    """A worker with nothing to do and a minute-long poll handles a timer armed 300 ms
    ahead at its fire time, not at the next poll: the arm woke it."""
    server = start("redis")
    log = tmp_path / "log.jsonl"
    worker = spawn(server.url, ["acme"], "w", str(log), 30_000, poll_interval=60.0)
    client = redis.Redis.from_url(server.url)
    wait_for(lambda: "cmd=blpop" in str(client.execute_command("CLIENT", "LIST")))
    fire_at = _soon(300)
    RedisStore(client, tenant="acme").timers.arm(Timer("r", "sleep", fire_at))
    wait_for(lambda: any(e["event"] == "done" for e in read(log)), timeout=20)
    started = next(e for e in read(log) if e["event"] == "start")
    assert started["at"] >= fire_at.timestamp() - 0.001  # never early
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert worker.exitcode == 0


def _run_in_thread(worker: Any) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_worker_wakes_on_every_backend(backend, make):
    """On fakeredis, Redis, Valkey and both clusters, sync and async: a worker whose
    next poll is a minute away handles a timer armed 200 ms ahead within seconds."""
    store = make(backend.tenant)
    if backend.flavour == "async":
        astore = store._target  # the AsyncRedisStore behind the blocking view

        async def main() -> None:
            done = asyncio.Event()

            async def on_timer(s: Any, t: Timer) -> None:
                done.set()

            worker = AsyncWorker(astore, on_timer=on_timer, poll_interval=60.0)
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.sleep(0.3)
                await astore.timers.arm(Timer("r", "sleep", _soon(200)))
                await asyncio.wait_for(done.wait(), 20)
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)

        backend.loop.run_until_complete(main())
        assert store.timers.pending_count() == 0
        return
    done = threading.Event()
    worker = Worker(store, on_timer=lambda s, t: done.set(), poll_interval=60.0)
    thread = _run_in_thread(worker)
    try:
        time.sleep(0.3)  # the worker's first pass found nothing; it sleeps a minute
        store.timers.arm(Timer("r", "sleep", _soon(200)))
        assert done.wait(20)
    finally:
        worker.stop()
        thread.join(30)
    assert store.timers.pending_count() == 0


def test_the_async_worker_wakes_for_a_timer_armed_sooner():
    """AsyncWorker: the same wake-up, through an awaited BLPOP."""
    astore = fake_async_store("acme")

    async def main() -> bool:
        done = asyncio.Event()

        async def on_timer(s: Any, t: Timer) -> None:
            done.set()

        worker = AsyncWorker(astore, on_timer=on_timer, poll_interval=60.0)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        await astore.timers.arm(Timer("r", "sleep", _soon(200)))
        try:
            await asyncio.wait_for(done.wait(), 20)
            return True
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)

    assert asyncio.run(main())


def test_a_parked_wait_brings_the_redelivery_pass_forward():
    """park_wait wakes a worker, whose redelivery pass then runs at once, however long
    its redelivery interval."""
    store = fake_store("acme")
    got = threading.Event()
    worker = Worker(
        store,
        on_timer=lambda s, t: None,
        on_redelivery=lambda s, w, e: got.set(),
        poll_interval=60.0,
        redelivery_interval=3600.0,
    )
    thread = _run_in_thread(worker)
    try:
        time.sleep(0.3)  # the first pass ran its redelivery; the next is an hour away
        store.events.buffer(ev("e1", "k/1"))
        assert store.events.claim_for(sub("r", "w", "k/1")) is not None
        store.events.park_wait(sub("r", "w", "k/1"))  # the delivery path gave up
        assert got.wait(20)
    finally:
        worker.stop()
        thread.join(30)


def test_running_workers_are_registered_and_leave_when_stopped():
    """A running worker renews its entry in each tenant's registry (host, pid,
    tenants, concurrency, started, last pass); it leaves when it stops, and an entry
    whose beats stopped (a killed worker) is dropped by the next heartbeat."""
    from agentplane_redis.worker import HEARTBEAT_S, MISSED_BEATS

    server = fake_server()
    a, b = fake_store("a", server=server), fake_store("b", server=server)
    worker = Worker([a, b], on_timer=lambda s, t: None, concurrency=2)
    thread = _run_in_thread(worker)
    try:
        wait_for(lambda: len(a.workers.running()) == 1 and len(b.workers.running()) == 1)
        entry = a.workers.running()[0]
        assert entry.worker == worker.worker_id
        assert entry.record["pid"] == os.getpid()
        assert entry.record["tenants"] == ["a", "b"]
        assert entry.record["concurrency"] == 2
    finally:
        worker.stop()
        thread.join(30)
    assert a.workers.running() == []
    assert b.workers.running() == []
    # A dead worker's entry: dropped once it is MISSED_BEATS beats old.
    ttl = timedelta(seconds=HEARTBEAT_S * MISSED_BEATS)
    a.workers.heartbeat("dead:1", {"host": "gone"}, ttl)
    assert [e.worker for e in a.workers.running()] == ["dead:1"]
    # dead:1 beat a moment ago, however slow the machine: not stale within a minute
    assert a.workers.heartbeat("alive:2", {"host": "here"}, timedelta(minutes=1)) == 0
    time.sleep(0.01)
    # now 10 ms old, past a 5 ms ttl; alive:2 renews itself before the registry is read
    assert a.workers.heartbeat("alive:2", {"host": "here"}, timedelta(milliseconds=5)) == 1
    assert [e.worker for e in a.workers.running()] == ["alive:2"]


@pytest.mark.real
def test_the_registry_shows_worker_processes_and_forgets_a_killed_one(start, tmp_path):
    """Two worker processes beat every 0.2 s: both listed with their pids; one killed
    (SIGKILL, no goodbye) is dropped within a few beats of the other; one stopped
    with SIGTERM leaves at once."""
    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="acme")
    log = tmp_path / "log.jsonl"
    procs = [
        spawn(server.url, ["acme"], f"w{i}", str(log), 30_000, heartbeat_interval=0.2)
        for i in range(2)
    ]
    pids = {p.pid for p in procs}

    def listed() -> set[int]:
        return {e.record["pid"] for e in store.workers.running()}

    wait_for(lambda: listed() == pids)
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join(30)
    wait_for(lambda: listed() == {procs[1].pid}, timeout=30)
    os.kill(procs[1].pid, signal.SIGTERM)
    procs[1].join(30)
    assert procs[1].exitcode == 0
    assert listed() == set()
