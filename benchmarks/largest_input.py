"""Server time of one call at the largest input a store accepts (contract 7.2).

Every operation, at default options, on items at the largest a store accepts,
in two shapes, since the keys' bytes are bounded in all (``codec.MAX_KEY_BYTES``,
each key counted with the identifiers its index entries repeat):

* **many keys**: ``max_correlation_keys`` (64) keys per event and wait, the
  identifiers sized so that the keys come to exactly 64 KiB;
* **long identifiers**: every identifier at ``codec.MAX_ID_BYTES`` (4 KiB), with
  as many keys as the 64 KiB take (3 per event, 2 per wait).

Payloads are ``max_payload_bytes`` (1 MiB), operators' and cases' identifiers
4 KiB, and steps as full as the store makes them (a sweep, purge or listing
step of such rows). Each call's server-side duration is read from SLOWLOG
(``slowlog-log-slower-than 0``). Prints the slowest call of each operation;
the contract's bound is 10 ms for any call. A round's slowest call is taken
over every round (the median, and the most): the machine's own stalls (another
process taking the CPU) land in single calls.

    python benchmarks/largest_input.py [--server valkey|redis] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import redis
from targets import server_version

from agentplane_redis import CorrelationKey, InboundEvent, Operator, RedisStore, Subscription, Timer
from agentplane_redis.acl import load_library
from agentplane_redis.codec import MAX_ID_BYTES, MAX_KEY_BYTES
from agentplane_redis.embedded import Server
from agentplane_redis.ops import DEFAULT_MAX_PAYLOAD, LIST_BATCH, PURGE_BATCH, SWEEP_BATCH
from agentplane_redis.scripts import library

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: The bound on any one call's server time at the largest accepted input, in us.
BOUND_US = 10_000


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


#: The shapes measured: bytes of the identifiers index entries repeat (kind, source,
#: id, run, effect), of a key's namespace and value, and keys per event and wait.
SHAPES = {
    "many keys": {"repeated": 256, "key": 128, "event_keys": 64, "wait_keys": 64},
    "long identifiers": {
        "repeated": MAX_ID_BYTES,
        "key": MAX_ID_BYTES,
        "event_keys": 3,
        "wait_keys": 2,
    },
}
SIZE = dict(SHAPES["many keys"])


def sized(tag: str, size: int) -> str:
    """An identifier of exactly ``size`` bytes, distinct by ``tag``."""
    head = f"{tag}:"
    return head + "x" * max(0, size - len(head.encode()))


def ident(tag: str) -> str:
    """An identifier that index entries repeat, at the shape's size."""
    return sized(tag, SIZE["repeated"])


def full(tag: str) -> str:
    """An identifier no index entry repeats (an operator, a case): 4 KiB."""
    return sized(tag, MAX_ID_BYTES)


def keys(tag: str, count: int) -> tuple[CorrelationKey, ...]:
    return tuple(
        CorrelationKey(sized(f"ns{i}", SIZE["key"]), sized(f"{tag}{i}", SIZE["key"]))
        for i in range(count)
    )


#: A payload whose compact JSON is max_payload_bytes long.
PAYLOAD = {"blob": "p" * (DEFAULT_MAX_PAYLOAD - len(json.dumps({"blob": ""})))}


def event(tag: str) -> InboundEvent:
    by = Operator(full("actor"), full("basis"))
    correlation = keys(tag, SIZE["event_keys"])
    return InboundEvent(
        ident(f"src{tag}"), ident(f"id{tag}"), ident("kind"), PAYLOAD, correlation, by
    )


def wait(tag: str, run: str) -> Subscription:
    correlation = keys(tag, SIZE["wait_keys"])
    return Subscription(
        ident(f"run{run}"), ident(f"effect{tag}"), ident("kind"), correlation, 7, case=full("case")
    )


def timer(tag: str, fire_ms: int) -> Timer:
    return Timer(full("run-t"), full(f"t{tag}"), at(fire_ms), case=full("case"))


def workload(store: RedisStore, r: str) -> None:
    """Each operation at its largest: items at their limits, steps as full as they get."""
    ev, tm, rn = store.events, store.timers, store.runs
    for i in range(LIST_BATCH + SWEEP_BATCH):
        ev.buffer(event(f"{r}b{i}"), at=at(i))
    ev.subscribe(wait(f"{r}b0", f"{r}s"), at=at(100))
    ev.claim_for(wait(f"{r}b0", f"{r}s"), at=at(101))
    ev.subscribe(wait(f"{r}d", f"{r}d"), at=at(102))
    ev.deliver(event(f"{r}d"), at=at(103))  # resumes the wait: 64 keys each
    ev.deliver(event(f"{r}n"), at=at(104))  # buffers: no wait
    ev.wait(wait(f"{r}b1", f"{r}w"), at=at(105))
    ev.wait(wait(f"{r}none", f"{r}w2"), at=at(105))  # registers: no event
    ev.buffer(event(f"{r}m"), at=at(106))
    ev.subscribe(wait(f"{r}m", f"{r}m"), at=at(106))
    ev.match_waiter(event(f"{r}m"), at=at(107))
    ev.subscribe(wait(f"{r}t", f"{r}t"), at=at(108))
    ev.deliver_to(ident(f"run{r}t"), event(f"{r}t"), at=at(109))
    ev.park_wait(wait(f"{r}p", f"{r}p"), at=at(110))
    ev.parked_waits()
    ev.erase_payload(ident(f"src{r}b2"), ident(f"id{r}b2"))
    ev.lookup(ident(f"src{r}b3"), ident(f"id{r}b3"))
    ev.unsubscribe(ident(f"run{r}s"), ident(f"effect{r}b0"))
    ev.unsubscribe_run(ident(f"run{r}w"), [ident(f"effect{r}b1")])
    ev.waiting()
    ev.stats()
    ev.sweep_unclaimed(at(200))
    ev.dead_letters(LIST_BATCH)
    ev.purge(at(200), limit=PURGE_BATCH)
    for i in range(40):
        tm.arm(timer(f"{r}{i}", i))
    tm.claim_due(now=at(100))
    tm.pending(LIST_BATCH)
    tm.armed(full("run-t"))
    tm.disarm(full("run-t"), full(f"t{r}0"))
    tm.disarm_many([(full("run-t"), full(f"t{r}{i}")) for i in range(1, 33)])
    tm.disarm_run(full("run-t"))
    ev.subscribe(wait(f"{r}c", f"{r}c"), at=at(300))
    tm.arm(Timer(ident(f"run{r}c"), ident("tc"), at(300)))
    rn.close(ident(f"run{r}c"))
    rn.seal(ident(f"run{r}sealed"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        load_library(client)
        store = RedisStore(client, tenant="largest")
        names = {function: name for name, function in library().functions.items()}
        #: Each round's slowest call of each operation in each shape.
        rounds: dict[tuple[str, str], list[int]] = defaultdict(list)
        store.events.stats()  # warm
        for shape, size in SHAPES.items():
            SIZE.update(size)
            for round_ in range(args.rounds):
                client.slowlog_reset()
                workload(store, f"{shape}-{round_}")
                slowest: dict[tuple[str, str], int] = defaultdict(int)
                for entry in client.slowlog_get(100_000):
                    command = entry["command"].split()
                    if command and command[0].upper() == b"FCALL":
                        name = (names.get(command[1].decode(), "?"), shape)
                        slowest[name] = max(slowest[name], int(entry["duration"]))
                for name, us in slowest.items():
                    rounds[name].append(us)
            client.flushall()
        version = server_version(client)
    typical = {name: int(statistics.median(us)) for name, us in rounds.items()}
    worst = {name: max(us) for name, us in rounds.items()}
    print(
        f"{args.server} {version}; payloads {DEFAULT_MAX_PAYLOAD} B; keys at {MAX_KEY_BYTES} B"
        f" per event and wait; {args.rounds} rounds. Server time of each operation's slowest"
        " call in a round, us: the median over the rounds (and the most of any round)"
    )
    ops = sorted({name for name, _ in rounds}, key=lambda n: -max(typical[n, s] for s in SHAPES))
    print(f"{'operation':18} " + " ".join(f"{shape:>22}" for shape in SHAPES))
    for name in ops:
        cells = [f"{typical[name, shape]:>10d} ({worst[name, shape]:>6d})" for shape in SHAPES]
        print(f"{name:18} " + " ".join(f"{cell:>22}" for cell in cells))
    slowest_typical, slowest_any = max(typical.values()), max(worst.values())
    verdict = "within" if slowest_typical <= BOUND_US else "OVER"
    print(
        f"slowest call: {slowest_typical} us, median over the rounds ({verdict} the bound of"
        f" {BOUND_US} us); the most of any round: {slowest_any} us"
    )


if __name__ == "__main__":
    main()
