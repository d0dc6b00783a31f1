"""How many keys a tenant's slot holds, and how long moving them in one MIGRATE takes.

Starts a cluster (three masters, a replica each), fills one tenant with
``--items`` buffered events (payloads of ``--payload`` bytes), registered waits
and armed timers, printing the keys in the tenant's slot after each kind
(``CLUSTER COUNTKEYSINSLOT``: the tenant's fixed keys and its buckets, which
grow with it), then moves the slot to another master as ``docs/cluster.md``
says, all its keys in one ``MIGRATE`` (``embedded.Cluster.move_slot``), and
checks that the store on the new master counts what it counted before.

    python benchmarks/slot_move.py [--server valkey|redis] [--items 10000] [--payload 700]
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta, timezone

import redis
from redis.crc import key_slot

from agentplane_redis import InboundEvent, RedisStore, Subscription, Timer
from agentplane_redis.embedded import Cluster
from agentplane_redis.keys import TenantKeys
from agentplane_redis.model import CorrelationKey

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def fill(store: RedisStore, kind: str, items: int, payload: int) -> None:
    for i in range(items):
        at = T0 + timedelta(milliseconds=i)
        if kind == "events":
            key = (CorrelationKey("order", f"A-{i}"),)
            event = InboundEvent("src", f"e{i}", "paid", {"blob": "x" * payload}, key)
            store.events.buffer(event, at=at)
        elif kind == "waits":
            key = (CorrelationKey("ticket", f"T-{i}"),)
            store.events.subscribe(Subscription(f"run-{i}", "w", "paid", key), at=at)
        else:
            store.timers.arm(Timer(f"run-{i}", f"t-{i}", at + timedelta(days=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--payload", type=int, default=700)
    args = parser.parse_args()
    tenant = "acme"
    slot = key_slot(TenantKeys(tenant).key("events").encode())
    with Cluster(args.server) as cluster:
        store = RedisStore.from_url(cluster.url, tenant=tenant)
        print(
            f"{args.server} cluster; tenant {tenant!r} in slot {slot}\n\n"
            "| the tenant holds | keys in its slot | its master's used_memory |\n|---|---:|---:|"
        )
        held: list[str] = []
        for kind in ("events", "waits", "timers"):
            fill(store, kind, args.items, args.payload)
            held.append(f"{args.items:,} {kind}")
            with redis.Redis(port=cluster.owner(slot).port) as master:
                keys = master.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
                used = master.info("memory")["used_memory_human"]
            print(f"| {', '.join(held)} | {keys:,} | {used} |")
        before = (store.events.stats(), store.timers.pending_count())
        source = cluster.owner(slot)
        target = next(m for m in cluster.masters_now() if m.port != source.port)
        t0 = time.monotonic()
        moved = cluster.move_slot(slot, target, batch=1_000_000)
        took = time.monotonic() - t0
        after = (store.events.stats(), store.timers.pending_count())
        store.close_connection()
        assert cluster.owner(slot).port == target.port
        assert after == before, (before, after)
        print(
            f"\nmoved {moved:,} keys in one MIGRATE in {took:.3f} s;"
            " the store on the new master counts what it counted before"
        )


if __name__ == "__main__":
    main()
