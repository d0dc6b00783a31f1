"""How late timers fire through the worker: handler start minus ``fire_at``.

    python benchmarks/lateness.py [--server valkey|redis] [--tries 40] [--timers 1000]
        [--seconds 20] [--idle 20]

Starts a throwaway server and real worker processes (``Worker``, default settings
but a trivial handler that reports its lateness), and measures:

* **idle**: one idle worker; a timer armed 200 ms ahead, ``--tries`` times, each
  after the worker has gone back to sleep;
* **stream**: ``--timers`` timers armed 200 ms ahead of their fire times, at an
  even rate over ``--seconds``, with 1 and with 4 worker processes;
* **idle commands**: the commands a worker with nothing to do sends the server per
  minute (``INFO commandstats`` of the commands a client sends, over ``--idle``
  seconds, scaled), with wake-ups and
  polling every second (``wake=False, poll_interval=1``) as before them.

The same idle and stream runs with polling are reported beside, as the ceiling
the wake-ups replace. Lateness in ms: p50, p99 and max.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

from agentplane_redis import RedisStore, Timer
from agentplane_redis.embedded import Server
from agentplane_redis.worker import Worker

SPAWN = multiprocessing.get_context("spawn")
TENANT = "lateness"
AHEAD_MS = 200
#: The commands a worker sends (those its scripts call inside are not counted).
SENT = ("fcall", "evalsha", "blpop", "ping", "hello")


def work(url: str, late: Any, wake: bool) -> None:
    """A worker process: each handled timer's lateness (ms) goes on ``late``."""
    store = RedisStore.from_url(url, tenant=TENANT)

    def on_timer(_store: Any, timer: Timer) -> None:
        late.put((time.time() - timer.fire_at.timestamp()) * 1000)

    options: dict[str, Any] = {} if wake else {"wake": False, "poll_interval": 1.0}
    Worker(store, on_timer=on_timer, **options).run()


def workers(url: str, n: int, wake: bool) -> tuple[list[Any], Any]:
    late = SPAWN.Queue()
    procs = [SPAWN.Process(target=work, args=(url, late, wake), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs, late


def stop(procs: list[Any]) -> None:
    """Stops the workers (SIGTERM: each finishes its pass), killing any that has
    not stopped within 20 s: a worker left running, riding out the outage of a
    server this script has stopped, would keep the script from exiting (its
    daemon children are joined at exit)."""
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(20)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)


def settle(client: redis.Redis, n: int, wake: bool) -> None:
    """Until every worker has made its first pass (and, with wake-ups, blocks)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = str(client.execute_command("CLIENT", "LIST"))
        if not wake or listed.count("cmd=blpop") >= n:
            time.sleep(1.5 if not wake else 0.2)
            return
        time.sleep(0.05)
    raise RuntimeError("the workers did not start")


def soon(ms: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(milliseconds=ms)


def idle(url: str, client: redis.Redis, tries: int, wake: bool) -> list[float]:
    procs, late = workers(url, 1, wake)
    try:
        settle(client, 1, wake)
        store = RedisStore(client, tenant=TENANT)
        out = []
        for i in range(tries):
            store.timers.arm(Timer("idle", f"t{i}-{wake}", soon(AHEAD_MS)))
            out.append(late.get(timeout=30))
            time.sleep(0.1 + 0.2 * (i % 3) / 2)  # back to sleep, at various phases
        return out
    finally:
        stop(procs)


def stream(
    url: str, client: redis.Redis, n: int, *, seconds: float, procs_n: int, wake: bool
) -> list[float]:
    procs, late = workers(url, procs_n, wake)
    try:
        settle(client, procs_n, wake)
        store = RedisStore(client, tenant=TENANT)
        start = time.monotonic()
        for i in range(n):
            due = start + i * seconds / n
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            store.timers.arm(Timer(f"s{i % 50}", f"t{i}-{procs_n}-{wake}", soon(AHEAD_MS)))
        return [late.get(timeout=60) for _ in range(n)]
    finally:
        stop(procs)


def idle_commands(url: str, client: redis.Redis, seconds: float, wake: bool) -> float:
    procs, _late = workers(url, 1, wake)
    try:
        settle(client, 1, wake)
        client.config_resetstat()
        time.sleep(seconds)
        stats = client.info("commandstats")
        calls = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in SENT)
        return calls * 60 / seconds
    finally:
        stop(procs)


def row(name: str, late: list[float]) -> str:
    ordered = sorted(late)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"| {name} | {len(late):,} | {statistics.median(late):.1f} | {p99:.1f} | {max(late):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--tries", type=int, default=40)
    parser.add_argument("--timers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        info = client.info("server")
        version = info.get("valkey_version") or info.get("redis_version")
        print(f"{args.server} {version}; a timer armed {AHEAD_MS} ms ahead of its fire time\n")
        print("| lateness, ms (handler start minus fire_at) | timers | p50 | p99 | max |")
        print("|---|---:|---:|---:|---:|")
        for wake, how in ((True, "wake-ups"), (False, "polling every second")):
            print(
                row(f"idle worker, {how}", idle(server.url, client, args.tries, wake)), flush=True
            )
            for n in (1, 4):
                late = stream(
                    server.url, client, args.timers, seconds=args.seconds, procs_n=n, wake=wake
                )
                plural = "s" if n > 1 else ""
                name = f"{args.timers:,} timers over {args.seconds:g} s, {n} worker{plural}, {how}"
                print(row(name, late), flush=True)
        print("\n| an idle worker | server commands per minute |\n|---|---:|")
        for wake, how in ((True, "wake-ups"), (False, "polling every second")):
            print(
                f"| {how} | {idle_commands(server.url, client, args.idle, wake):,.0f} |", flush=True
            )


if __name__ == "__main__":
    main()
