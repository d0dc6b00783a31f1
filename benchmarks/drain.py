"""The timer drain: 4 worker processes drain past-due jobs, side by side with arq,
saq and bullmq on the same server, next to the 4-process trivial-script ceiling.

    python benchmarks/drain.py [--server valkey|redis] [--jobs 20000] [--processes 4]
        [--runs 3] [--peers arq,saq,bullmq]

The peers are installed into a venv of their own (``benchmarks/.peers-venv``,
versions pinned in ``PEERS``) the first time, and run by
``benchmarks/peers/drain.py``. Each run empties the server, enqueues the jobs
(here: arms timers due an hour ago), starts the worker processes, which wait
for a go key, and times from the go to the last process's exit. Every job is
a no-op, so the figures are each queue's own cost. Our workers claim pages of
128 with ``claim_due`` and complete each timer with ``disarm``, or each page
with one ``disarm_many`` (the batch completion). The ceiling:
the same number of processes calling a ``return 1`` script as fast as they
can. Server CPU per job is ``INFO cpu`` (user + sys) before and after, over the
jobs. Medians of ``--runs``; one line per system.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import redis
from targets import flush, server_version

from agentplane_redis import RedisStore, Timer
from agentplane_redis.embedded import Server

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE / ".peers-venv"
PEERS = {"arq": "arq==0.28.0", "saq": "saq==0.26.4", "bullmq": "bullmq==2.15.0"}
#: What a peer needs that its package does not pull in (saq imports typing_extensions).
PEER_EXTRAS = ["typing_extensions"]
GO = "drain:go"
#: Our two ways to complete: a call per timer, or one per page.
OURS = {"agentplane-redis, disarm": "each", "agentplane-redis, disarm_many": "page"}
TENANT = "drain"


def peers_python(peers: list[str]) -> Path:
    """The peers' venv's python, made and filled the first time."""
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    missing = [
        spec
        for name, spec in PEERS.items()
        if name in peers
        and subprocess.run(
            [str(python), "-c", f"import {name}"], capture_output=True, check=False
        ).returncode
    ]
    if missing:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *missing, *PEER_EXTRAS], check=True
        )
    return python


def wait_for_go(url: str) -> None:
    client = redis.Redis.from_url(url)
    while not client.exists(GO):
        time.sleep(0.002)
    client.close()


def work(url: str, batch: bool) -> None:
    """One of our worker processes: claim pages, complete each timer (``disarm``), or
    each page (``disarm_many``)."""
    store = RedisStore.from_url(url, tenant=TENANT)
    store.timers.next_due()  # connected and loaded before the go
    wait_for_go(url)
    while page := store.timers.claim_due(limit=128):
        if batch:
            store.timers.disarm_many(page)
        else:
            for timer in page:
                store.timers.disarm(timer.run, timer.effect)


def trivial(url: str, calls: int) -> None:
    client = redis.Redis.from_url(url)
    sha = client.script_load("return 1")
    wait_for_go(url)
    for _ in range(calls):
        client.evalsha(sha, 0)


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def timed(client: redis.Redis, commands: list[list[str]]) -> tuple[float, float]:
    """Starts the processes, lets them go, and returns (seconds, server CPU seconds)."""
    procs = [subprocess.Popen(c) for c in commands]
    time.sleep(1.0)  # started, imported, connected
    before = cpu(client)
    t0 = time.perf_counter()
    client.set(GO, 1)
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a worker failed: {' '.join(commands[0])}")
    elapsed = time.perf_counter() - t0
    return elapsed, cpu(client) - before


def fill_ours(url: str, jobs: int) -> None:
    store = RedisStore.from_url(url, tenant=TENANT)
    due = datetime.now(timezone.utc) - timedelta(hours=1)
    for i in range(jobs):
        store.timers.arm(Timer(f"run-{i % 1000}", f"job-{i}", due))
    store.close_connection()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers", default="arq,saq,bullmq")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    python = peers_python(peers) if peers else None
    me = [sys.executable, str(Path(__file__).resolve())]
    results: dict[str, list[tuple[float, float]]] = {}
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        for _ in range(args.runs):
            flush(client)
            share = args.jobs // args.processes
            cmd = [*me, "--trivial", server.url, str(share)]
            results.setdefault("trivial script", []).append(timed(client, [cmd] * args.processes))
            for system in [*OURS, *peers]:
                flush(client)
                if system in OURS:
                    fill_ours(server.url, args.jobs)
                    cmd = [*me, "--work", server.url, OURS[system]]
                else:
                    peer = [str(python), str(HERE / "peers" / "drain.py")]
                    subprocess.run([*peer, "fill", system, server.url, str(args.jobs)], check=True)
                    cmd = [*peer, "work", system, server.url, str(args.jobs)]
                results.setdefault(system, []).append(timed(client, [cmd] * args.processes))
            left = client.hlen(f"agentplane:{{{TENANT}}}:timer")
            if left:
                raise SystemExit(f"{left} timers were not drained")
    jobs = args.processes * (args.jobs // args.processes)
    rate = {
        name: statistics.median((jobs if name == "trivial script" else args.jobs) / s for s, _ in r)
        for name, r in results.items()
    }
    cpu_us = {
        name: statistics.median(c / args.jobs * 1e6 for _, c in r) for name, r in results.items()
    }
    ceiling = rate["trivial script"]
    fastest = max((rate[p] for p in peers), default=0.0)
    print(f"{args.server} {version}; {args.jobs:,} jobs, {args.processes} processes,")
    print(f"median of {args.runs} runs\n")
    print("| system | jobs/s | of the ceiling | server CPU per job | vs fastest peer |")
    print("|---|---:|---:|---:|---:|")
    for name in results:
        versus = f"{rate[name] / fastest:.1f}x" if fastest and name != "trivial script" else ""
        print(
            f"| {name} | {rate[name]:,.0f} | {rate[name] / ceiling:.2f} |"
            f" {cpu_us[name]:.0f} µs | {versus} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--work":
        work(sys.argv[2], sys.argv[3] == "page")
    elif len(sys.argv) > 3 and sys.argv[1] == "--trivial":
        trivial(sys.argv[2], int(sys.argv[3]))
    else:
        main()
