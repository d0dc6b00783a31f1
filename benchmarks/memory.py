"""Memory per item, at each size and item distribution, next to its target.

    python benchmarks/memory.py [--server valkey|redis] [--sizes 10000,100000,1000000]
                                [--kinds timer,wait,event]

Each kind of item goes into a tenant of its own on a throwaway server, through
the store (one call per item): armed timers with one timer per run and with 20
per run, registered waits (one correlation key each) and buffered events (one
correlation key each, a small payload, whose JSON bytes are taken off). The
figure is ``used_memory`` grown by the items, over their number, with the
tenant's remembered replies dropped first (they are bounded per tenant whatever
its size: ``docs/reliability.md``). Beside each size: the target, and the ratio
of the bytes per item at the smallest size to those at the largest (the target
is at most 1.25: a tenant grows without anyone sizing it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import redis
from targets import PAYLOAD, at, event, flush, server_version, wait

from agentplane_redis import RedisStore, Timer
from agentplane_redis.embedded import Server

#: name -> (how the i-th item is added, the target in bytes per item).
KINDS: dict[str, tuple[Callable[[RedisStore, int], Any], int]] = {
    "armed timer, 1 per run": (lambda s, i: s.timers.arm(Timer(f"run-{i}", "t", at(i))), 180),
    "armed timer, 20 per run": (
        lambda s, i: s.timers.arm(Timer(f"run-{i // 20}", f"t-{i % 20}", at(i))),
        180,
    ),
    "registered wait": (lambda s, i: s.events.subscribe(wait(i), at=at(i)), 200),
    "buffered event (beyond payload)": (lambda s, i: s.events.buffer(event(i), at=at(i)), 250),
}


def per_item(client: redis.Redis, name: str, items: int) -> float:
    """Bytes per item of ``items`` items of kind ``name``, in a fresh tenant."""
    add, _ = KINDS[name]
    client.config_set("slowlog-log-slower-than", -1)  # its entries would count
    client.slowlog_reset()
    store = RedisStore(client, tenant=f"memory-{name.split(maxsplit=1)[0]}-{items}")
    replies = [store.keys.key("replies"), store.keys.key("replies_old")]
    before = int(client.info("memory")["used_memory"])
    for i in range(items):
        add(store, i)
    store.close_connection()
    client.delete(*replies)
    grown = int(client.info("memory")["used_memory"]) - before
    payload = len(json.dumps(PAYLOAD, separators=(",", ":")))
    return grown / items - (payload if name.startswith("buffered") else 0)


def memory(
    client: redis.Redis, sizes: list[int], kinds: list[str] | None = None
) -> dict[str, dict[int, float]]:
    """Bytes per item at each size, of the kinds whose names hold one of ``kinds``."""
    out: dict[str, dict[int, float]] = {}
    for name in KINDS:
        if kinds and not any(k in name for k in kinds):
            continue
        out[name] = {}
        for items in sizes:
            flush(client)
            out[name][items] = per_item(client, name, items)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="redis")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--kinds", default="", help="only kinds naming one of these words")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(f"{args.server} {server_version(client)}\n")
        found = memory(client, sizes, [k for k in args.kinds.split(",") if k])
    heads = " | ".join(f"{n:,}" for n in sizes)
    print(f"| bytes per item | {heads} | target | smallest / largest |")
    print("|---|" + "---:|" * (len(sizes) + 2))
    for name, by_size in found.items():
        cells = " | ".join(f"{by_size[n]:.0f}" for n in sizes)
        ratio = by_size[sizes[0]] / by_size[sizes[-1]]
        print(f"| {name} | {cells} | {KINDS[name][1]} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
