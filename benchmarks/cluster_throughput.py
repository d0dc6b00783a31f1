"""Throughput of the store on a cluster of 1, 2 and 3 masters, and on one server.

Client processes deliver brand-new events (``events.deliver``: one script
call, a write) as fast as they can for a fixed time, each on a tenant of its
own, the tenants picked so that every master serves the same number. The
cluster has no replicas here: on a two-core machine a replica would take CPU
from the masters it copies, which says nothing about how shards scale.

    python benchmarks/cluster_throughput.py [--server valkey|redis] [--seconds 5]
        [--clients 6] [--masters 1,2,3]

It prints one Markdown row per setting: calls per second in all, per master,
the p50 and p99 latency of one call, the servers' CPU time per call (from
``INFO cpu`` before and after) and how busy the busiest master was. On a
machine whose cores the clients share with the servers, the calls per second
say more about the clients than the cluster; the CPU per call and the busiest
master's share say what a master can take: about ``1 / (CPU per call)`` calls
per second when it has a core of its own, times the number of masters.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

import redis
from redis.crc import key_slot

from agentplane_redis import InboundEvent, RedisStore
from agentplane_redis.embedded import SLOTS, Cluster, Server
from agentplane_redis.keys import TenantKeys
from agentplane_redis.model import CorrelationKey


def tenants_spread(masters: int, clients: int) -> list[str]:
    """``clients`` tenant names, spread evenly over masters with an even slot split."""
    chosen: list[str] = []
    n = 0
    while len(chosen) < clients:
        want = len(chosen) % masters
        name = f"bench-{n}"
        slot = key_slot(TenantKeys(name).key("events").encode())
        if slot * masters // SLOTS == want:
            chosen.append(name)
        n += 1
    return chosen


def client(url: str, tenant: str, seconds: float, go: Any, out: Any) -> None:
    store = RedisStore.from_url(url, tenant=tenant)
    key = (CorrelationKey("order", "A-1"),)
    store.events.stats()  # connected, scripts looked up
    latencies: list[float] = []
    go.wait()
    deadline = time.monotonic() + seconds
    n = 0
    while True:
        t0 = time.monotonic()
        if t0 >= deadline:
            break
        store.events.deliver(InboundEvent("bench", f"{tenant}-{n}", "order", {"n": n}, key))
        latencies.append(time.monotonic() - t0)
        n += 1
    out.put((n, latencies))


def cpu_seconds(ports: list[int]) -> dict[int, float]:
    out = {}
    for port in ports:
        with redis.Redis(port=port) as node:
            info = node.info("cpu")
        out[port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return out


def measure(
    url: str, tenants: list[str], seconds: float, ports: list[int]
) -> tuple[float, float, float, float, float]:
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(url, t, seconds, go, out)) for t in tenants]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every client connected
    before = cpu_seconds(ports)
    go.set()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    after = cpu_seconds(ports)
    for p in procs:
        p.join()
    calls = sum(n for n, _ in results)
    latencies = sorted(x for _, lat in results for x in lat)
    p50 = statistics.median(latencies) * 1e3
    p99 = latencies[int(len(latencies) * 0.99)] * 1e3
    used = {port: after[port] - before[port] for port in ports}
    per_call_us = sum(used.values()) / calls * 1e6
    busiest = max(used.values()) / seconds * 100
    return calls / seconds, p50, p99, per_call_us, busiest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="valkey", choices=["valkey", "redis"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--masters", default="1,2,3")
    args = parser.parse_args()
    print(f"{args.server}, {args.clients} client processes, {args.seconds:g} s each\n")
    print(
        "| setting | calls/s | per master | p50 ms | p99 ms | server CPU µs/call"
        " | busiest master CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")

    def row(name: str, masters: int, found: tuple[float, float, float, float, float]) -> None:
        rate, p50, p99, per_call, busiest = found
        print(
            f"| {name} | {rate:,.0f} | {rate / masters:,.0f} | {p50:.2f} | {p99:.2f}"
            f" | {per_call:.0f} | {busiest:.0f} % |"
        )

    with Server(args.server) as single:
        tenants = tenants_spread(1, args.clients)
        row("one server, no cluster", 1, measure(single.url, tenants, args.seconds, [single.port]))
    for masters in (int(m) for m in args.masters.split(",")):
        with Cluster(args.server, masters=masters, replicas=0) as cluster:
            tenants = tenants_spread(masters, args.clients)
            ports = [node.port for node in cluster.nodes]
            found = measure(cluster.url, tenants, args.seconds, ports)
            row(f"cluster, {masters} master(s)", masters, found)


if __name__ == "__main__":
    main()
