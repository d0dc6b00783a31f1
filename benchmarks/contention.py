"""Contention: 8 processes claim events buffered on one hot correlation key, through
the store and through a straightforward WATCH/MULTI claim written here.

    python benchmarks/contention.py [--server valkey|redis] [--events 8000]
        [--processes 8]

The WATCH/MULTI claim keeps the key's buffered events in a sorted set and the
claims in a hash: watch the set, read its first member, then remove it and
record the claim in a transaction, which fails (and is tried again) when
another process claimed first. The store's ``claim_for`` is one script, so it
never retries. Prints claims per second, retries per claim and the server CPU
per claim (``INFO cpu``), and checks that every event was claimed once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import redis
from targets import server_version

from agentplane_redis import CorrelationKey, InboundEvent, RedisStore, Subscription
from agentplane_redis.embedded import Server

HOT = (CorrelationKey("order", "HOT"),)
GO = "contention:go"
LIVE, CLAIMS, RETRIES = "watch:{hot}:live", "watch:{hot}:claims", "watch:{hot}:retries"


def wait_go(client: redis.Redis) -> None:
    while not client.exists(GO):
        time.sleep(0.002)


def ours(url: str, me: str) -> None:
    store = RedisStore.from_url(url, tenant="hot")
    store.events.stats()  # connected, library loaded
    wait_go(store.client)
    n = 0
    while store.events.claim_for(Subscription(f"{me}-{n}", "w", "payment.settled", HOT)):
        n += 1


def watched(url: str, me: str) -> None:
    client = redis.Redis.from_url(url)
    wait_go(client)
    retries = n = 0
    while True:
        with client.pipeline() as pipe:
            try:
                pipe.watch(LIVE)
                first = pipe.zrange(LIVE, 0, 0)
                if not first:
                    break
                pipe.multi()
                pipe.zrem(LIVE, first[0])
                pipe.hset(CLAIMS, first[0], f"{me}-{n}")
                pipe.execute()
                n += 1
            except redis.WatchError:
                retries += 1
    client.incrby(RETRIES, retries)


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(client: redis.Redis, cmds: list[list[str]]) -> tuple[float, float]:
    procs = [subprocess.Popen(c) for c in cmds]
    time.sleep(1.0)
    before, t0 = cpu(client), time.perf_counter()
    client.set(GO, 1)
    for p in procs:
        if p.wait():
            raise SystemExit("a claiming process failed")
    return time.perf_counter() - t0, cpu(client) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--events", type=int, default=8000)
    parser.add_argument("--processes", type=int, default=8)
    args = parser.parse_args()
    me = [sys.executable, str(Path(__file__).resolve())]
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        store = RedisStore(client, tenant="hot")
        for i in range(args.events):
            store.events.buffer(InboundEvent("s", f"e{i}", "payment.settled", {}, HOT))
        s1, c1 = run(client, [[*me, "--ours", server.url, f"p{p}"] for p in range(args.processes)])
        left = store.events.stats().live
        claimed = store.events.stats().claimed
        client.delete(GO)
        client.zadd(LIVE, {f"e{i}": i for i in range(args.events)})
        s2, c2 = run(
            client, [[*me, "--watched", server.url, f"p{p}"] for p in range(args.processes)]
        )
        retries = int(client.get(RETRIES) or 0)
        watched_claims = client.hlen(CLAIMS)
    if left or claimed != args.events or watched_claims != args.events:
        raise SystemExit(f"claims lost or doubled: {claimed}, {watched_claims}, {left} left")
    print(f"{args.server} {version}; {args.events:,} events on one correlation key,")
    print(f"{args.processes} processes claiming\n")
    print("| claim | claims/s | retries per claim | server CPU per claim |")
    print("|---|---:|---:|---:|")
    n = args.events
    print(f"| store `claim_for` (one script) | {n / s1:,.0f} | 0 | {c1 / n * 1e6:.0f} µs |")
    print(f"| WATCH/MULTI | {n / s2:,.0f} | {retries / n:.2f} | {c2 / n * 1e6:.0f} µs |")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--ours":
        ours(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 3 and sys.argv[1] == "--watched":
        watched(sys.argv[2], sys.argv[3])
    else:
        main()
