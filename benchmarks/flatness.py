"""Flat cost: each operation's latency and server time with a small tenant and a large one.

    python benchmarks/flatness.py [--server valkey|redis] [--small 1000] [--large 1000000]
        [--calls 300] [--inner buffer,erase_payload]

Fills a tenant with ``--small`` rows and another with ``--large`` (half
buffered events, a quarter registered waits, a quarter armed timers; sent in
pipelines of the same function calls the store makes), plus a neighbour tenant
with ``--large`` rows of its own, then runs ``--calls`` of each operation on
each tenant, the two tenants taking turns call by call so that the machine's
drift falls on both alike, and reads each call's server time from ``SLOWLOG``
(every operation but the multi-step passes, ``sweep_unclaimed``, ``purge``
and ``parked_waits``, whose steps are bounded, and the listings, which cost in
proportion to their page). Prints the p50 per operation and tenant and their
ratio: the cost does not grow with the tenant when the ratio stays near 1.
SLOWLOG records whole microseconds, so the p50 is interpolated within its
microsecond: an operation of 3 to 4 µs is not read as 3 on one tenant and 4
on the other by rounding alone. Then, with SLOWLOG off, ``--calls`` more of
each operation on rows of their own, the tenants taking turns the same way,
each call timed by the caller around the store's method: the latency a worker
sees (its client's work, the round trip and the server's), p50 per operation
and tenant. For the operations named by ``--inner``
(``buffer`` and ``erase_payload``, the two that grow the most), it also prints
the p50 of each command their calls made, by the key it wrote: where the
growth goes.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import redis
from targets import Slowlog, event, server_version, wait

from agentplane_redis import RedisStore, Timer, ops
from agentplane_redis.embedded import Server

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
PIPELINE = 2000


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def pipelined(store: RedisStore, plans: Any) -> None:
    """Sends the first call of each plan, as the store would (FCALL of its function,
    the library verified at the store's start-up), in pipelines."""
    driver = store._driver
    assert driver.library is not None
    pipe = store.client.pipeline(transaction=False)
    for n, plan in enumerate(plans, 1):
        call = next(plan)
        function = driver.library.functions[call.script]
        pipe.execute_command("FCALL", function, *driver._command(call, []))
        plan.close()
        if n % PIPELINE == 0:
            pipe.execute()
    pipe.execute()


def fill(store: RedisStore, rows: int, tag: str) -> None:
    ctx = store._driver.ctx
    store.events.stats()  # the library is loaded
    events, waits = rows // 2, rows // 4
    pipelined(store, (ops.buffer(ctx, event(i, tag), at=at(i)) for i in range(events)))
    pipelined(
        store,
        (ops.subscribe(ctx, wait(10**7 + i), at=at(i)) for i in range(waits)),
    )
    pipelined(
        store,
        (
            ops.arm(ctx, Timer(f"idle-{i % 1000}", f"{tag}-{i}", at(10**9 + i)))
            for i in range(rows - events - waits)
        ),
    )


#: The step that calls a script of another name.
STEP_OF = {"deliver": "deliver (resumes a wait)", "pending": "next_due"}


def steps_of(store: RedisStore) -> dict[str, Callable[[int], Any]]:
    """Each operation, called with ``i``, on rows of its own."""
    steps: dict[str, Callable[[int], Any]] = {
        "buffer": lambda i: store.events.buffer(event(i, "x"), at=at(i)),
        "subscribe": lambda i: store.events.subscribe(wait(i), at=at(i)),
        "deliver (resumes a wait)": lambda i: store.events.deliver(event(i, "y"), at=at(i)),
        "claim_for": lambda i: store.events.claim_for(wait(i), at=at(i)),
        "wait": lambda i: store.events.wait(wait(i), at=at(i)),
        "unsubscribe": lambda i: store.events.unsubscribe(f"run-{i}", "await-payment"),
        "lookup_event": lambda i: store.events.lookup("stripe", f"x_{i}"),
        "minter": lambda i: store.events.minter("stripe", f"x_{i}"),
        "arm": lambda i: store.timers.arm(Timer("flat", f"t-{i}", at(i))),
        "claim_due": lambda i: store.timers.claim_due(now=at(i), limit=1),
        "disarm": lambda i: store.timers.disarm("flat", f"t-{i}"),
        "pending_count": lambda i: store.timers.pending_count(),
        "stats": lambda i: store.events.stats(),
        "match_waiter": lambda i: store.events.match_waiter(event(i, "x"), at=at(i)),
        "deliver_to": lambda i: store.events.deliver_to(f"to-{i}", event(i, "z"), at=at(i)),
        "park_wait": lambda i: store.events.park_wait(wait(i), at=at(i)),
        "erase_payload": lambda i: store.events.erase_payload("stripe", f"x_{i}"),
        "lookup_wait": lambda i: store.events.lookup_wait(f"run-{i}", "await-payment"),
        "oldest_live": lambda i: store.events.oldest_live(),
        "lookup_timer": lambda i: store.timers.lookup("flat", f"t-{i}"),
        "armed": lambda i: store.timers.armed(f"flat-{i}"),
        "next_due": lambda i: store.timers.next_due(),
        "disarm_run": lambda i: store.timers.disarm_run(f"flat-{i}"),
        "seal": lambda i: store.runs.seal(f"sealed-{i}"),
        "is_sealed": lambda i: store.runs.is_sealed(f"sealed-{i}"),
        "close": lambda i: store.runs.close(f"run-{i}", ["await-payment"]),
    }
    return steps


def key_of(entry: dict[str, Any]) -> str:
    """The first key of a logged FCALL or EVALSHA, or of a command a script called."""
    parts = Slowlog.words(entry)
    first = 3 if parts and parts[0].upper() in ("FCALL", "EVALSHA") else 1
    return parts[first] if len(parts) > first else ""


def tenant_of(entry: dict[str, Any]) -> str:
    """The tenant a logged call or command names in its first key."""
    key = key_of(entry)
    return key[key.find("{") + 1 : key.find("}")] if "{" in key else ""


def command_of(entry: dict[str, Any]) -> str:
    """A command a script called, and the key it wrote by its suffix: ``ZADD event:live``,
    a bucket's number written ``<bucket>`` (``ZADD event:key:<bucket>``)."""
    suffix = re.sub(r":\d+$", ":<bucket>", key_of(entry).partition("}:")[2])
    return f"{Slowlog.words(entry)[0].upper()} {suffix}"


def p50(durations: list[int]) -> float:
    """The median of durations SLOWLOG records in whole microseconds, interpolated
    within its microsecond (each reading k standing for k - 1/2 .. k + 1/2), so that a
    call of a few microseconds is not read as 3 or 4 by rounding alone."""
    ordered = sorted(durations)
    m = statistics.median_low(ordered)
    below = sum(1 for d in ordered if d < m)
    at = sum(1 for d in ordered if d == m)
    return m - 0.5 + (len(ordered) / 2 - below) / at


def measure(
    client: redis.Redis, stores: list[RedisStore], calls: int, inner: Sequence[str] = ()
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The p50 of each operation on each store: its server time, and its latency
    through the store. The stores take turns call by call, so that the machine's drift
    falls on both alike, each going first every other turn.

    Server time: ``calls`` calls with every command logged; each logged call is told to
    its store by the tenant its first key names. For the operations in ``inner``, the
    p50 of each command their calls made as well, as ``<operation>: <command> <key>``.

    Latency: ``calls`` more calls (on rows of their own, ``i`` from ``calls`` on) with
    SLOWLOG off, each timed around the store's method, in microseconds."""
    log = Slowlog(client)
    logged: list[dict[str, list[int]]] = [{} for _ in stores]
    waited: list[dict[str, list[float]]] = [{} for _ in stores]
    plans = [steps_of(store) for store in stores]
    tenants = [store.keys.tenant for store in stores]

    def in_turn(i: int) -> list[tuple[int, dict[str, Callable[[int], Any]]]]:
        # Which store goes first alternates too: the second of two calls in a row
        # finds the function's code warm in the CPU's caches.
        turns = list(enumerate(plans))
        return turns if i % 2 == 0 else turns[::-1]

    for name in plans[0]:
        for i in range(calls):
            for _, plan in in_turn(i):
                plan[name](i)
        for entry in client.slowlog_get(2_000_000):
            script, tenant = log.name_of(entry), tenant_of(entry)
            if tenant not in tenants:
                continue
            if script is None and name in inner:
                script = f"{name}: {command_of(entry)}"
            if script not in (None, "trivial", "?"):
                logged[tenants.index(tenant)].setdefault(str(script), []).append(entry["duration"])
        client.config_set("slowlog-log-slower-than", -1)
        for i in range(calls, 2 * calls):
            for k, plan in in_turn(i):
                t0 = time.perf_counter_ns()
                plan[name](i)
                waited[k].setdefault(name, []).append((time.perf_counter_ns() - t0) / 1000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
    server = [{script: p50(times) for script, times in found.items()} for found in logged]
    latency = [{name: statistics.median(ts) for name, ts in found.items()} for found in waited]
    return server, latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument(
        "--inner",
        default="buffer,erase_payload",
        help="operations whose commands are shown one by one too (comma-separated)",
    )
    args = parser.parse_args()
    inner = [name for name in args.inner.split(",") if name]
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        small = RedisStore(client, tenant="small")
        large = RedisStore(client, tenant="large")
        fill(small, args.small, "s")
        fill(large, args.large, "l")
        fill(RedisStore(client, tenant="neighbour"), args.large, "n")
        used = int(client.info("memory")["used_memory"]) / 2**20
        (a, b), (la, lb) = measure(client, [small, large], args.calls, inner)
    print(f"{args.server} {version}; {args.small:,} and {args.large:,} rows, a neighbour")
    print(f"of {args.large:,}; {used:,.0f} MiB in use; p50 of {args.calls} calls each, server time")
    print("from SLOWLOG, latency timed by the caller around the store's method (SLOWLOG off)\n")
    small_rows, large_rows = f"{args.small:,} rows", f"{args.large:,} rows"
    print(
        f"| operation | server time, {small_rows} | {large_rows} | ratio"
        f" | latency, {small_rows} | {large_rows} | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    order = ["buffer", "subscribe", "deliver", "claim_for", "wait", "unsubscribe"]
    order += ["match_waiter", "deliver_to", "park_wait", "erase_payload", "lookup_event"]
    order += ["lookup_wait", "minter", "oldest_live", "stats", "arm", "claim_due", "disarm"]
    order += ["lookup_timer", "armed", "pending", "disarm_run", "pending_count", "seal"]
    order += ["is_sealed", "close"]
    ops_only = [n for n in a if ":" not in n]
    for name in sorted(ops_only, key=lambda n: order.index(n) if n in order else len(order)):
        step = STEP_OF.get(name, name)
        seen = (
            f" {la[step]:.0f} µs | {lb[step]:.0f} µs | {lb[step] / la[step]:.2f} |"
            if step in la
            else " | | |"
        )
        label = name if step.startswith(name) else f"{name} ({step})"
        print(f"| {label} | {a[name]:.1f} µs | {b[name]:.1f} µs | {b[name] / a[name]:.2f} |{seen}")
    commands = sorted(n for n in a if ":" in n and n in b)
    if commands and not any(a[n] or b[n] for n in commands):
        # Valkey 8 logs the commands a script calls, each with a duration of 0.
        print("\nThe server logs the commands inside a script with no time of their own:")
        print("no table of them (Redis times each).")
    elif commands:
        print("\n| a command inside the operation, p50 | small | large | ratio |")
        print("|---|---:|---:|---:|")
        for name in commands:  # a command can log 0 µs: no ratio then
            ratio = f"{b[name] / a[name]:.2f}" if a[name] > 0 else ""
            print(f"| {name} | {a[name]:.2f} µs | {b[name]:.2f} µs | {ratio} |")


if __name__ == "__main__":
    main()
