"""Memory the remembered replies take, under one-shot stores at a sustained rate.

A store made for one call (a CLI run, a request handler's) writes once and is
gone. Each write remembers its reply for a call re-sent after a lost reply
(``docs/reliability.md``); a store acknowledges what it received when it closes,
and a store that never closes never does. Either way the tenant's remembered
replies stay within two generations of ``REPLY_GENERATION_BYTES``: this runs
both kinds of client for ``--seconds`` at ``--rate`` one-shot writes a second
(each a new ``RedisStore`` over one client, arming a timer) and prints, every few
seconds, the entries and the memory (``MEMORY USAGE``, exact) of the tenant's
two reply hashes.

    python benchmarks/reply_memory.py [--server valkey|redis] [--seconds 30] [--rate 1000]
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta, timezone

import redis
from targets import server_version

from agentplane_redis import RedisStore, Timer
from agentplane_redis.acl import load_library
from agentplane_redis.embedded import Server

#: One generation's bytes, as lua/_lib/core.lua counts them.
REPLY_GENERATION_BYTES = 1 << 20
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def usage(client: redis.Redis, keys: list[str]) -> tuple[int, int]:
    """Entries (less each hash's byte counter) and exact memory of the reply hashes."""
    entries = memory = 0
    for key in keys:
        if client.exists(key):
            entries += int(client.hlen(key)) - 1
            memory += int(client.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0"))
    return entries, memory


def run(client: redis.Redis, tenant: str, closes: bool, seconds: float, rate: float) -> None:
    keys = [f"agentplane:{{{tenant}}}:reply", f"agentplane:{{{tenant}}}:reply:old"]
    label = "closed after its call" if closes else "never closed"
    print(f"\none-shot stores, {label}:")
    print(f"{'s':>4} {'writes':>8} {'writes/s':>9} {'entries':>8} {'reply memory':>13}")
    start, writes, peak, report = time.monotonic(), 0, 0, 0.0
    while (elapsed := time.monotonic() - start) < seconds:
        store = RedisStore(client, tenant=tenant)
        store.timers.arm(Timer("run", f"t{writes}", T0 + timedelta(seconds=writes)))
        if closes:
            store.close_connection()  # acknowledges the reply it received
        writes += 1
        ahead = writes / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
        if elapsed >= report:
            entries, memory = usage(client, keys)
            peak = max(peak, memory)
            print(
                f"{elapsed:4.0f} {writes:8d} {writes / max(elapsed, 1e-9):9.0f} {entries:8d}"
                f" {memory:13,d}"
            )
            report += max(1.0, seconds / 10)
    entries, memory = usage(client, keys)
    peak = max(peak, memory)
    print(
        f"after {writes} writes ({writes / seconds:.0f}/s): {entries} remembered replies,"
        f" {memory:,} B; the most seen: {peak:,} B"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        load_library(client)
        print(
            f"{args.server} {server_version(client)}; one generation:"
            f" {REPLY_GENERATION_BYTES:,} B counted; target {args.rate:.0f} writes/s"
        )
        run(client, "careless", False, args.seconds, args.rate)
        run(client, "careful", True, args.seconds, args.rate)


if __name__ == "__main__":
    main()
