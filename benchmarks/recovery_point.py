"""How much acknowledged work a server crash loses, per durability setting.

Writer processes store events (``buffer``) as fast as they can, each noting
every acknowledged id and when it was acknowledged. The server is then killed
with SIGKILL, restarted from its files, and every acknowledged id is looked up:
the ones missing are the acknowledged writes the crash lost, and the age of
the oldest of them at the crash is the recovery point actually seen.

    python benchmarks/recovery_point.py [--server valkey|redis] [--seconds 3] [--writers 4]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from typing import Any

import redis

from agentplane_redis import InboundEvent, RedisStore
from agentplane_redis.embedded import Server

SETTINGS = [
    ("no AOF, no snapshots", "fast", ("--appendonly", "no")),
    ("AOF everysec", "fast", ("--appendonly", "yes", "--appendfsync", "everysec")),
    ("AOF always", "fast", ("--appendonly", "yes", "--appendfsync", "always")),
    (
        "AOF everysec, acknowledged",
        "acknowledged",
        ("--appendonly", "yes", "--appendfsync", "everysec"),
    ),
]


def writer(url: str, name: str, durability: str, out: Any, go: Any) -> None:
    store = RedisStore(redis.Redis.from_url(url), tenant="rpo", durability=durability)
    acked: list[tuple[str, float]] = []
    go.wait()
    n = 0
    try:
        while True:
            event_id = f"{name}-{n}"
            store.events.buffer(InboundEvent("src", event_id, "k"))
            acked.append((event_id, time.time()))
            n += 1
    except (redis.RedisError, OSError):
        pass
    out.put(acked)


def measure(
    kind: str, extra: tuple[str, ...], durability: str, seconds: float, writers: int
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    server = Server(kind, extra=("--save", "", *extra)).start()
    try:
        out, go = ctx.Queue(), ctx.Barrier(writers + 1)
        procs = [
            ctx.Process(target=writer, args=(server.url, f"w{i}", durability, out, go))
            for i in range(writers)
        ]
        for p in procs:
            p.start()
        go.wait()
        time.sleep(seconds)
        crashed_at = time.time()
        server.crash()
        acked = [item for _ in procs for item in out.get(timeout=60)]
        for p in procs:
            p.join(30)
        server.restart()
        client = redis.Redis.from_url(server.url)
        store = RedisStore(client, tenant="rpo")
        lost = [(i, t) for i, t in acked if store.events.minter("src", i) is None]
        window = max((crashed_at - t for _, t in lost), default=0.0)
        return {
            "acknowledged": len(acked),
            "lost": len(lost),
            "oldest lost, ms before the crash": round(window * 1000),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="valkey", choices=["valkey", "redis"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    for label, durability, extra in SETTINGS:
        if durability == "acknowledged" and args.server == "redis":
            continue  # Redis 7.0 confirms with WAIT, which needs a replica
        result = measure(args.server, extra, durability, args.seconds, args.writers)
        print(json.dumps({"server": args.server, "setting": label, **result}))


if __name__ == "__main__":
    main()
