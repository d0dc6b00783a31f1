"""Where one store call's time goes: its round trip, the server's part of it, and the
store's own Python around it, for every single operation ``targets.py`` times.

Starts a throwaway server, fills a tenant with ``--rows`` rows per structure, and
for each operation of ``targets.single_operations`` (its items prepared first)
runs ``--calls`` calls one after another on one connection, timing each call
whole and its round trip (the packed command sent and its reply read, the
server's time in it); the server's time is the mean of ``INFO commandstats``
for ``FCALL`` over the same calls. What is left is the store's Python: checking and encoding
the arguments, the call token, packing the command, reading the reply into its
values. A trivial ``EVALSHA`` through redis-py is timed after each operation.

    python benchmarks/call_time.py [--server valkey|redis] [--rows 2000] [--calls 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import redis
from targets import TRIVIAL, fill, prepared_operations, server_mean, server_version

from agentplane_redis import RedisStore, wire
from agentplane_redis.embedded import Server


class RoundTrips:
    """Time spent in the store's round trips while installed (``wire._round_trip``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._inner: Callable[..., Any] = wire._round_trip

    def __enter__(self) -> RoundTrips:
        inner = self._inner

        def timed(conn: Any, packed: bytes) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(conn, packed)
            finally:
                self.seconds += time.perf_counter() - t0

        wire._round_trip = timed
        return self

    def __exit__(self, *_: object) -> None:
        wire._round_trip = self._inner


def timed(op: Callable[[int], Any], n: int, spent: list[float]) -> Callable[[], None]:
    """``n`` calls of ``op`` one after another, their seconds appended to ``spent``."""

    def batch() -> None:
        t0 = time.perf_counter()
        for i in range(n):
            op(i)
        spent.append(time.perf_counter() - t0)

    return batch


def call_times(client: redis.Redis, store: RedisStore, n: int) -> list[tuple[str, ...]]:
    """Per operation: µs per call whole, its round trip, the server's part, the
    store's Python, and the trivial ``EVALSHA``'s whole call."""
    trivial = client.script_load(TRIVIAL)
    rows = []
    with RoundTrips() as trips:
        for name, op in prepared_operations(store, n):
            spent: list[float] = []
            trips.seconds = 0.0
            server, calls = server_mean(client, "fcall", timed(op, n, spent))
            whole = spent[0] / n * 1e6
            trip = trips.seconds / n * 1e6
            t0 = time.perf_counter()
            for _ in range(n):
                client.evalsha(trivial, 0)
            ceiling = (time.perf_counter() - t0) / n * 1e6
            rows.append(
                (
                    name,
                    f"{whole:.0f}",
                    f"{trip:.0f}",
                    f"{server:.0f}" + ("" if calls == n else f" ({calls / n:.1f} calls)"),
                    f"{whole - trip:.0f}",
                    f"{ceiling:.0f}",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(f"{args.server} {server_version(client)}; {args.rows:,} rows per structure\n")
        store = RedisStore(client, tenant="bench")
        fill(store, args.rows)
        print(
            "| µs per call, one connection | whole call | round trip | of which the server"
            " | the store's Python | trivial EVALSHA, whole |\n|---|---:|---:|---:|---:|---:|"
        )
        for row in call_times(client, store, args.calls):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
