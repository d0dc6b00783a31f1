"""The proof under load and faults (real processes, real servers): an auditor reads the
raw keys after each run, and the workers' logs show nothing acknowledged was lost.

Small by default; ``--soak`` runs the full size."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import redis
from audit import Audit, check_log, load

from agentplane_redis import RedisStore

from helpers import at, ev, sub, timer

pytestmark = pytest.mark.real
SPAWN = multiprocessing.get_context("spawn")
KINDS = ["redis", "valkey"]


def ops(request: pytest.FixtureRequest, small: int, soak: int) -> int:
    return soak if request.config.getoption("--soak") else small


def run_load(url: str, tmp_path: Any, procs: int, count: int, during: Any = None) -> list[Any]:
    """procs worker processes on tenant "audit"; ``during()`` runs while they do."""
    start = SPAWN.Barrier(procs + 1)
    log = str(tmp_path / "results.jsonl")
    workers = [
        SPAWN.Process(target=load, args=(url, "audit", f"p{i}", count, 1000 + i, log, start))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    start.wait(timeout=120)
    if during is not None:
        during(workers)
    for w in workers:
        w.join(600)
        assert w.exitcode == 0, f"a worker exited with {w.exitcode}"
    with open(log) as f:
        return [json.loads(line) for line in f]


def audit(url: str, lines: list[Any]) -> dict[str, int]:
    client = redis.Redis.from_url(url)
    counts = Audit(client, "audit").run()
    proven = check_log(lines, client, "audit")
    assert proven["acknowledged events"] > 0
    assert proven["timer claims"] > 0
    return {**counts, **proven}


@pytest.mark.parametrize("kind", KINDS)
def test_eight_processes_leave_every_invariant_intact(start, kind, tmp_path, request):
    """8 processes, mixed operations on shared keys: the audit and the logs hold."""
    server = start(kind)
    lines = run_load(server.url, tmp_path, 8, ops(request, 150, 3000))
    print(audit(server.url, lines))


@pytest.mark.parametrize("kind", KINDS)
def test_ten_server_crashes_under_load_lose_nothing_acknowledged(start, kind, tmp_path, request):
    """kill -9 of the server ten times under load (appendfsync always), restarted from
    its AOF each time: nothing acknowledged is lost and the audit holds."""
    server = start(kind, appendonly=True, extra=("--appendfsync", "always"))
    rng = random.Random(7)

    def crash_ten_times(workers: list[Any]) -> None:
        for _ in range(10):
            time.sleep(rng.uniform(0.2, 0.6))
            server.crash()
            time.sleep(rng.uniform(0.0, 0.2))
            server.restart()

    lines = run_load(server.url, tmp_path, 6, ops(request, 200, 2000), crash_ten_times)
    print(audit(server.url, lines))


@pytest.mark.parametrize("kind", KINDS)
def test_client_kills_and_script_flushes_under_load(start, kind, tmp_path, request):
    """Connections killed, the script cache and the library flushed while 8 processes
    work."""
    server = start(kind)
    admin = redis.Redis.from_url(server.url)
    kills = []

    def chaos(workers: list[Any]) -> None:
        def go() -> None:
            while any(w.is_alive() for w in workers):
                try:
                    kills.append(admin.client_kill_filter(_type="normal", skipme=True))
                    admin.script_flush()
                    admin.function_flush()
                except redis.ConnectionError:  # the test is over
                    return
                time.sleep(0.05)

        threads.append(threading.Thread(target=go, daemon=True))
        threads[0].start()

    threads: list[threading.Thread] = []
    lines = run_load(server.url, tmp_path, 8, ops(request, 150, 3000), chaos)
    threads[0].join(10)  # its last kill would otherwise hit the auditor's connection
    assert sum(kills) > 0, "no connection was killed"
    print(audit(server.url, lines))


# ---------------------------------------------------------------- killed inside a step


def _die_after(url: str, steps: int, op: str) -> None:
    """Runs op, SIGKILLing this process after `steps` replies of it arrived."""
    store = RedisStore.from_url(url, tenant="audit")
    driver = store._driver
    real, seen = driver.execute, [0]

    def execute(call: Any, *more: Any) -> Any:
        reply = real(call, *more)
        seen[0] += 1
        if seen[0] == steps:
            os.kill(os.getpid(), signal.SIGKILL)
        return reply

    driver.execute = execute  # type: ignore[method-assign]
    MULTI_STEP[op][1](store)


MULTI_STEP: dict[str, tuple[Any, Any, Any]] = {
    # name: (setup, the call, whether the state is what the finished call leaves)
    "sweep_unclaimed": (
        lambda s: [s.events.buffer(ev(f"e{i}", "k/1"), at=at(i)) for i in range(100)],
        lambda s: s.events.sweep_unclaimed(at(1000)),
        lambda s: s.events.stats().dead == 100 and s.events.stats().live == 0,
    ),
    "purge": (
        lambda s: (
            [s.events.buffer(ev(f"e{i}", "k/1"), at=at(i)) for i in range(200)],
            s.events.sweep_unclaimed(at(1000)),
        ),
        lambda s: s.events.purge(at(1000)),
        lambda s: s.events.stats().dead == 0,
    ),
    "claim_due": (
        lambda s: [s.timers.arm(timer("r", f"t{i:03}", i)) for i in range(100)],
        lambda s: s.timers.claim_due(now=at(1000), limit=1000, lease=timedelta(hours=1)),
        lambda s: s.client.zcard(s.keys.key("timer_walk")) == 0,
    ),
    "parked_waits": (
        lambda s: (
            [s.events.park_wait(sub(f"r{i}", "w", "k/1"), at=at(i)) for i in range(60)],
            [s.runs.seal(f"r{i}") for i in range(0, 60, 2)],
        ),
        lambda s: s.events.parked_waits(1000),
        lambda s: s.events.stats().parked == 30,
    ),
}


@pytest.mark.parametrize("op", list(MULTI_STEP))
def test_a_worker_killed_inside_a_multi_step_operation_leaves_valid_progress(start, op):
    """SIGKILL after the second step: the state audits clean, and calling again finishes."""
    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="audit")
    setup, call, finished = MULTI_STEP[op]
    setup(store)
    victim = SPAWN.Process(target=_die_after, args=(server.url, 2, op))
    victim.start()
    victim.join(60)
    assert victim.exitcode == -signal.SIGKILL
    Audit(redis.Redis.from_url(server.url), "audit").run()
    assert not finished(store), "the killed call had finished anyway"
    call(store)
    assert finished(store)
    Audit(redis.Redis.from_url(server.url), "audit").run()
