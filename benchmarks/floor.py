"""How low a layout could go: the fewest entries and commands, measured next to the targets.

    python benchmarks/floor.py [--server valkey|redis] [--items 100000] [--calls 2000]

**Memory.** For each item of ``targets.py`` (the same identities, keys and
instants), builds only the index entries the contract's operations cannot do
without, each in its tightest encoding, and reads ``used_memory`` grown per
item, next to the library's own items built in the same run:

* an **armed timer**: one entry ordered by ``fire_at`` (``claim_due``'s walk,
  ``pending``, ``next_due``; a sorted set of the timer's identity scored by
  ``fire_at``, which also answers "is it armed?" through the set's own
  dictionary) and one entry ordered by run (``armed``, ``disarm_run`` and
  ``close`` cost in proportion to the run, section 7.2), whose member carries
  the identity and the row (step, phase, case). With those two, a ``claim_due``
  step passes over the timers under a lease at the head of the walk (a
  sweeper's page each, until it disarms them); the layout that keeps them out
  of the walk, as the library's ``timer:ready`` and ``timer:held`` do, needs a
  third entry, one of the unheld timers by ``fire_at``, also measured;
* a **registered wait** (one key): its election entry (kind, key, registration
  instant, identity: the order the search reads), its entry in registration
  order (``waiting``) and one entry by identity, whose member carries the
  row (kind, step, phase, case, instant, keys): the identity lookup and the
  per-run walks;
* a **buffered event** (one key), beyond its payload: its row with the payload
  in one hash entry (the dedup identity, ``minter``, ``lookup``), and the three
  orders the live row is searched and swept by: by kind and key, by kind,
  sender and key (section 7.2: ``from_source`` forces no scan), and by age
  (``sweep_unclaimed``).

Instants inside members are 8 bytes (big-endian, offset), identifiers
components as in ``docs/keys.md``, rows fields with a one-byte length. Each
item has one entry in each order it is read by: packing many items into one
value (a run's timers in one field, say) would make every write cost in
proportion to the items sharing the value, which the flatness target rules
out, and a tenant's fixed, small set of keys (contract 7.1) keeps every large
structure in Redis's hash-table and skiplist encodings, where each entry
costs its own pointers and allocations. So no layout stores these items in
fewer or smaller entries.

**Server time.** Loads a throwaway library of sketches (``SKETCH``): functions
that keep the same orders up to date as the library does, with only the
commands that takes on a layout chosen for few commands, and nothing else: no
validation, no corruption checks, none of the contract's other cases. It
measures each life cycle's mean server time per call (``INFO commandstats``,
SLOWLOG off), as ``targets.py`` does for the library, with and without
remembering replies (a call token checked and the reply kept, which the
contract requires of a write in some form, sections 7.4 and 10), next to
entering a function and one command inside one. The trivial script and the
library's own life cycles are measured in the same rounds, which alternate,
so the machine's drift falls on all alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
from collections.abc import Callable
from typing import Any

import redis
from targets import (
    PAYLOAD,
    TRIVIAL,
    at,
    event,
    flush,
    memory,
    server_mean,
    server_version,
    unlogged,
    wait,
)

from agentplane_redis import RedisStore
from agentplane_redis.embedded import Server
from agentplane_redis.keys import component, event_id, tuple_member

#: Rounds of the time measurements; the figures are the medians.
ROUNDS = 3
PIPELINE = 1000
#: Entries of the structures one command is measured on.
LARGE = 10_000
#: The targets, as multiples of the trivial script and as bytes.
TARGETS = {"event life": 30, "timer life": 15, "timer life, completed by disarm_many": 10}
MEMORY_TARGETS = {
    "buffered event (beyond payload)": 250,
    "armed timer": 150,
    "registered wait": 200,
}

SKETCH = r"""#!lua name=agentplane_floor
-- Sketches of the life cycles on a layout chosen for few commands. They
-- validate nothing and handle only the path measured. KEYS: 1 replies, then
-- the structures each names. The last ARGV is the call token, "" for none.

local function seen(replies, token)
  return token ~= "" and redis.call("HGET", replies, token)
end

local function keep(replies, token, reply)
  if token ~= "" then
    redis.call("HSET", replies, token, reply)
  end
  return reply
end

redis.register_function("trivial", function() return 1 end)
redis.register_function("one_hget", function(k, a)
  redis.call("HGET", k[1], a[1])
  return 1
end)
redis.register_function("one_hset", function(k, a)
  redis.call("HSET", k[1], a[1], a[2])
  return 1
end)
redis.register_function("zadd_zrem", function(k, a)
  redis.call("ZADD", k[1], a[2], a[1])
  redis.call("ZREM", k[1], a[1])
  return 1
end)

-- Timers. KEYS: replies, rows (hash tid -> row), due (every timer by
-- fire_at: pending, next_due), ready (unheld timers by fire_at: the walk),
-- held (timers under a lease by expiry), run (tid: one run's timers).
redis.register_function("arm", function(k, a)
  local tid, fire_at, row, token = a[1], a[2], a[3], a[4]
  if seen(k[1], token) then return "REPLAY" end
  if redis.call("HSETNX", k[2], tid, fire_at .. row) == 0 then
    return keep(k[1], token, "SEEN")
  end
  redis.call("ZADD", k[3], fire_at, tid)
  redis.call("ZADD", k[4], fire_at, tid)
  redis.call("ZADD", k[6], 0, tid)
  return keep(k[1], token, "NEW")
end)

redis.register_function("claim_due", function(k, a)
  local now, expiry, token = a[1], a[2], a[3]
  if seen(k[1], token) then return {} end
  local page = redis.call("ZRANGEBYSCORE", k[4], "-inf", now, "LIMIT", 0, 128)
  if #page == 0 then return {} end
  local held = {}
  for i, tid in ipairs(page) do
    held[2 * i - 1], held[2 * i] = expiry, tid
  end
  redis.call("ZREM", k[4], unpack(page))
  redis.call("ZADD", k[5], unpack(held))
  local rows = redis.call("HMGET", k[2], unpack(page))
  keep(k[1], token, table.concat(rows, ","))
  return rows
end)

redis.register_function("disarm", function(k, a)
  local tid, token = a[1], a[2]
  if seen(k[1], token) then return "REPLAY" end
  if redis.call("HDEL", k[2], tid) == 0 then
    return keep(k[1], token, "NONE")
  end
  redis.call("ZREM", k[3], tid)
  redis.call("ZREM", k[4], tid)
  redis.call("ZREM", k[5], tid)
  redis.call("ZREM", k[6], tid)
  return keep(k[1], token, "REMOVED")
end)

-- Events. KEYS: replies, events (hash eid -> row), payloads (hash eid ->
-- payload), electable (kind key . instant . wid), ledger (hash wid -> eid),
-- marks (hash wid -> parked_at), waits (hash wid -> row), wait_order (wid key
-- by instant), consumed (eid by instant), ledger_by_run (wid . eid: one run's
-- claims), mark_index (wid: the parked waits listed).
redis.register_function("subscribe", function(k, a)
  local wid, prefix, instant, row, token = a[1], a[2], a[3], a[4], a[5]
  if seen(k[1], token) then return "REPLAY" end
  redis.call("HSET", k[7], wid, row)
  redis.call("ZADD", k[4], 0, prefix .. instant .. wid)
  redis.call("ZADD", k[8], a[6], wid .. prefix)
  return keep(k[1], token, "OK")
end)

redis.register_function("deliver", function(k, a)
  local eid, prefix, row, payload, at, token = a[1], a[2], a[3], a[4], a[5], a[6]
  if seen(k[1], token) then return "REPLAY" end
  if redis.call("HEXISTS", k[2], eid) == 1 then
    return keep(k[1], token, "DUPLICATE")
  end
  local found = redis.call("ZRANGEBYLEX", k[4], "[" .. prefix, "(" .. prefix .. "\255",
    "LIMIT", 0, 1)
  local wid = string.sub(found[1], #prefix + 9)
  redis.call("ZREM", k[4], found[1])
  redis.call("HSET", k[2], eid, row .. wid)
  redis.call("HSET", k[3], eid, payload)
  redis.call("HSET", k[5], wid, eid)
  redis.call("ZADD", k[10], 0, wid .. eid)
  redis.call("HSET", k[6], wid, at)
  redis.call("ZADD", k[11], 0, wid)
  return keep(k[1], token, "RESUMED" .. wid)
end)

redis.register_function("claim_for", function(k, a)
  local wid, token = a[1], a[2]
  if seen(k[1], token) then return "REPLAY" end
  local eid = redis.call("HGET", k[5], wid)
  local row = redis.call("HGET", k[2], eid)
  local payload = redis.call("HGET", k[3], eid)
  redis.call("HDEL", k[6], wid)
  redis.call("ZREM", k[11], wid)
  keep(k[1], token, row)
  return { row, payload }
end)

redis.register_function("unsubscribe", function(k, a)
  local wid, prefix, at, token = a[1], a[2], a[3], a[4]
  if seen(k[1], token) then return "REPLAY" end
  redis.call("HGET", k[7], wid)
  redis.call("HDEL", k[7], wid)
  redis.call("ZREM", k[8], wid .. prefix)
  local eid = redis.call("HGET", k[5], wid)
  redis.call("HDEL", k[5], wid)
  redis.call("ZREM", k[10], wid .. eid)
  redis.call("HSET", k[2], eid, "consumed")
  redis.call("HDEL", k[3], eid)
  redis.call("ZADD", k[9], at, eid)
  return keep(k[1], token, "OK")
end)
"""

TIMER_KEYS = [
    f"floor:{{sketch}}:{name}" for name in ("reply", "timer", "due", "ready", "held", "run")
]
EVENT_KEYS = [
    f"floor:{{sketch}}:{name}"
    for name in (
        "reply",
        "event",
        "payload",
        "electable",
        "ledger",
        "mark",
        "wait",
        "wait_order",
        "consumed",
        "ledger_by_run",
        "mark_index",
    )
]


def fill_sketch(client: redis.Redis, rows: int) -> None:
    """``rows`` entries in every structure of the sketches that none of their calls
    reads (members past every prefix, timers due in 30,000 years), so that each is in
    the encoding the library's keys have at a tenant's usual size, not the compact
    one of a small structure."""
    pipe = client.pipeline(transaction=False)
    for key in sorted(set(TIMER_KEYS + EVENT_KEYS)):
        if key.endswith(":reply"):
            continue
        hashed = key.rsplit(":", 1)[1] in ("timer", "event", "payload", "ledger", "mark", "wait")
        for i in range(rows):
            member = b"\xfffiller-%d" % i
            if hashed:
                pipe.hset(key, member, "x")
            else:
                pipe.zadd(key, {member: 10**15})
        pipe.execute()


#: The compact layout's buckets for the event sketches: the election entries (key
#: buckets), the wait rows (wait buckets) and the registration order (time buckets)
#: in small sorted sets and hashes that keep their listpack encoding, about
#: ``COMPACT_FILL`` entries each, as the library keeps them at a tenant's usual size.
COMPACT = {"electable": "zset", "wait": "hash", "wait_order": "zset"}
COMPACT_BUCKETS, COMPACT_FILL = 64, 90


def compact_keys(i: int) -> list[str]:
    """The event sketches' keys for their ``i``-th item on the compact layout: the
    bucket of the item in place of each tenant-wide structure ``COMPACT`` names."""
    return [
        f"{key}:{i % COMPACT_BUCKETS}" if key.rsplit(":", 1)[1] in COMPACT else key
        for key in EVENT_KEYS
    ]


def fill_compact(client: redis.Redis, n: int) -> None:
    """The buckets of ``compact_keys`` that ``n`` items use, each with ``COMPACT_FILL``
    entries none of the sketches' calls reads: listpacks of the size a call scans in
    the library."""
    filler = {b"\xfffiller-%d" % i: 10**15 for i in range(COMPACT_FILL)}
    pipe = client.pipeline(transaction=False)
    for bucket in range(min(n, COMPACT_BUCKETS)):
        for name, kind in COMPACT.items():
            key = f"floor:{{sketch}}:{name}:{bucket}"
            if kind == "hash":
                pipe.hset(key, mapping=dict.fromkeys(filler, "x" * 40))
            else:
                pipe.zadd(key, filler)
    pipe.execute()


def election_prefix(w: Any) -> bytes:
    """A wait's kind and (first) key, as its election entries begin."""
    key = w.correlation[0]
    return component(w.kind) + component(key.namespace) + component(key.value)


def instant(ms: int) -> bytes:
    """8 bytes whose byte order is time order."""
    return struct.pack(">Q", ms + 2**63)


def row(*fields: bytes) -> bytes:
    return b"".join(bytes([len(f)]) + f for f in fields)


def ms(n: int) -> int:
    return int(at(n).timestamp() * 1000)


#: A timer's step (4 bytes), phase and case, in the sketches' rows.
TIMER_ROW = row(struct.pack(">I", 0), b"f", b"")


def filled(client: redis.Redis, items: int, add: Callable[[Any, int], None]) -> float:
    """Bytes per item of ``used_memory`` grown by ``items`` of ``add``."""
    flush(client)
    before = int(client.info("memory")["used_memory"])
    pipe = client.pipeline(transaction=False)
    for i in range(items):
        add(pipe, i)
        if i % PIPELINE == PIPELINE - 1:
            pipe.execute()
    pipe.execute()
    return (int(client.info("memory")["used_memory"]) - before) / items


def timer_id(i: int) -> bytes:
    """The identity of the memory measures' ``i``-th timer, 500 runs among them."""
    return tuple_member([f"run-{i % 500}", f"t-{i}"])


def minimal_timer(pipe: Any, i: int) -> None:
    tid = timer_id(i)
    pipe.zadd("floor:{m}:due", {tid: ms(i)})
    pipe.zadd("floor:{m}:run", {tid + TIMER_ROW: 0})


def walked_timer(pipe: Any, i: int) -> None:
    """A timer with the walk kept apart from ``pending``: the fewest entries plus
    one ordered by ``fire_at`` that holds only unheld timers (a claimed timer
    leaves it for an order by lease expiry, as ``timer:ready`` and ``timer:held``
    do), so that a ``claim_due`` step never passes over timers under a lease."""
    minimal_timer(pipe, i)
    pipe.zadd("floor:{m}:ready", {timer_id(i): ms(i)})


def minimal_wait(pipe: Any, i: int) -> None:
    w = wait(i)
    wid = tuple_member([w.run, w.effect])
    key = component(w.correlation[0].namespace) + component(w.correlation[0].value)
    pipe.zadd("floor:{m}:electable", {election_prefix(w) + instant(ms(i)) + wid: 0})
    pipe.zadd("floor:{m}:order", {wid + key: ms(i)})
    attributes = row(w.kind.encode(), struct.pack(">I", 0), b"f", b"", b"", instant(ms(i)))
    pipe.zadd("floor:{m}:wait", {wid + attributes + key: 0})


def minimal_event(pipe: Any, i: int) -> None:
    e = event(i)
    eid = event_id(e.source, e.id)
    key = component(e.correlation[0].namespace) + component(e.correlation[0].value)
    kind = component(e.kind)
    when = instant(ms(i))
    payload = redis_payload()
    # state, kind, received_at, minter (none), keys; then the payload
    pipe.hset("floor:{m}:event", eid, row(b"l", e.kind.encode(), when, b"", key) + payload)
    pipe.zadd("floor:{m}:live:key", {kind + key + when + eid: 0})
    pipe.zadd("floor:{m}:live:sender", {kind + component(e.source) + key + when + eid: 0})
    pipe.zadd("floor:{m}:live", {eid: ms(i)})


def redis_payload() -> bytes:
    return json.dumps(PAYLOAD, separators=(",", ":")).encode()


def memory_floor(client: redis.Redis, items: int) -> dict[str, float]:
    client.config_set("slowlog-log-slower-than", -1)
    payload = len(redis_payload())
    return {
        "buffered event (beyond payload)": filled(client, items, minimal_event) - payload,
        "armed timer": filled(client, items, minimal_timer),
        "registered wait": filled(client, items, minimal_wait),
    }


def entry_sizes(client: redis.Redis, items: int) -> dict[str, float]:
    """What one entry costs in a large structure, by member size."""
    client.config_set("slowlog-log-slower-than", -1)
    return {
        "sorted-set entry, 8-byte member": filled(
            client, items, lambda p, i: p.zadd("floor:{m}:z", {instant(i): i})
        ),
        "sorted-set entry, a timer's id (run-…, t-…) as member": filled(
            client,
            items,
            lambda p, i: p.zadd("floor:{m}:z", {timer_id(i): i}),
        ),
        "hash entry, a timer's id to 8 bytes": filled(
            client,
            items,
            lambda p, i: p.hset("floor:{m}:h", timer_id(i), "12345678"),
        ),
    }


def mean_fcall(client: redis.Redis, batch: Callable[[], Any]) -> tuple[float, int]:
    """Mean server µs per FCALL of ``batch`` (SLOWLOG off), and how many calls."""
    return server_mean(client, "fcall", batch)


def sketch_lives(
    client: redis.Redis,
    n: int,
    base: int,
    tokens: bool,
    mean_fcall: Callable[[redis.Redis, Callable[[], Any]], tuple[float, int]] = mean_fcall,
) -> dict[str, float]:
    """Each life cycle of the sketches: mean µs per call (or what ``mean_fcall``
    measures per call), a timer's and an event's."""
    return {
        **timer_sketch_lives(client, n, base, tokens, mean_fcall),
        **event_sketch_lives(client, n, base, tokens, mean_fcall),
    }


def calls_token(base: int, tokens: bool) -> Callable[[str, int], str]:
    """The call token of a sketch's ``i``-th call of an operation, "" for none."""
    return (lambda op, i: f"{op}-{base + i}") if tokens else (lambda op, i: "")


def timer_sketch_lives(
    client: redis.Redis,
    n: int,
    base: int,
    tokens: bool,
    mean_fcall: Callable[[redis.Redis, Callable[[], Any]], tuple[float, int]] = mean_fcall,
) -> dict[str, float]:
    """A timer's life through the sketches (``sketch_lives``)."""
    token = calls_token(base, tokens)
    tk = TIMER_KEYS
    tids = [tuple_member([f"run-{i % 50}", f"timer-{base + i}"]) for i in range(n)]
    out: dict[str, float] = {}
    out["arm"], _ = mean_fcall(
        client,
        lambda: [
            client.fcall("arm", len(tk), *tk, tids[i], ms(i), TIMER_ROW, token("a", i))
            for i in range(n)
        ],
    )

    def claim_all() -> None:
        page = 0
        while client.fcall("claim_due", len(tk), *tk, ms(n), ms(n) + 60_000, token("c", page)):
            page += 1

    claim, claims = mean_fcall(client, claim_all)
    out["disarm"], _ = mean_fcall(
        client,
        lambda: [client.fcall("disarm", len(tk), *tk, tids[i], token("d", i)) for i in range(n)],
    )
    out["timer life"] = out["arm"] + claim * claims / n + out["disarm"]
    return out


def event_sketch_lives(
    client: redis.Redis,
    n: int,
    base: int,
    tokens: bool,
    mean_fcall: Callable[[redis.Redis, Callable[[], Any]], tuple[float, int]] = mean_fcall,
    *,
    event_keys: Callable[[int], list[str]] = lambda i: EVENT_KEYS,
) -> dict[str, float]:
    """An event's life through the sketches (``sketch_lives``), each item's keys
    ``event_keys(i)`` (the compact layout's: ``compact_keys``)."""
    token = calls_token(base, tokens)
    eks = [event_keys(i) for i in range(n)]
    out: dict[str, float] = {}
    waits = [wait(base + i) for i in range(n)]
    events = [event(base + i) for i in range(n)]
    wids = [tuple_member([w.run, w.effect]) for w in waits]
    prefixes = [election_prefix(w) for w in waits]
    for i in range(n):  # registered before: not part of the event's life
        client.fcall(
            "subscribe", len(eks[i]), *eks[i], wids[i], prefixes[i], instant(ms(i)), b"w", "", ms(i)
        )
    payload = redis_payload()
    out["deliver"], _ = mean_fcall(
        client,
        lambda: [
            client.fcall(
                "deliver",
                len(eks[i]),
                *eks[i],
                event_id(events[i].source, events[i].id),
                prefixes[i],
                row(b"h", instant(ms(i))),
                payload,
                ms(i),
                token("v", i),
            )
            for i in range(n)
        ],
    )
    out["claim_for"], _ = mean_fcall(
        client,
        lambda: [
            client.fcall("claim_for", len(eks[i]), *eks[i], wids[i], token("f", i))
            for i in range(n)
        ],
    )
    out["unsubscribe"], _ = mean_fcall(
        client,
        lambda: [
            client.fcall(
                "unsubscribe", len(eks[i]), *eks[i], wids[i], prefixes[i], ms(i), token("u", i)
            )
            for i in range(n)
        ],
    )
    out["event life"] = out["deliver"] + out["claim_for"] + out["unsubscribe"]
    return out


def parts(client: redis.Redis, n: int) -> dict[str, float]:
    """Entering a function with an ``unsubscribe``'s 18 keys and 3 arguments, and one
    command inside a function beyond entering it, mean µs per call. The commands
    work on structures of ``LARGE`` entries, in the encodings the library's keys
    have at a tenant's usual size (a hash table, a skiplist): a small hash in
    its compact encoding costs a scan of its entries per field written."""
    keys = [f"floor:{{sketch}}:k{i}" for i in range(18)]
    pipe = client.pipeline(transaction=False)
    for i in range(LARGE):
        pipe.hset(keys[0], f"f{i}", "v")
        pipe.zadd(keys[1], {f"m{i}": i})
    pipe.execute()
    entered, _ = mean_fcall(
        client, lambda: [client.fcall("trivial", 18, *keys, "run", "effect", "t") for _ in range(n)]
    )
    empty, _ = mean_fcall(client, lambda: [client.fcall("trivial", 0) for _ in range(n)])
    hget, _ = mean_fcall(
        client, lambda: [client.fcall("one_hget", 1, keys[0], f"f{i % LARGE}") for i in range(n)]
    )
    hset, _ = mean_fcall(
        client,
        lambda: [client.fcall("one_hset", 1, keys[0], f"f{i % LARGE}", "w") for i in range(n)],
    )
    pair, _ = mean_fcall(
        client, lambda: [client.fcall("zadd_zrem", 1, keys[1], f"n{i}", i) for i in range(n)]
    )
    client.delete(keys[0], keys[1])
    return {
        "an empty function, no keys (FCALL)": empty,
        "an empty function with 18 keys and 3 arguments": entered,
        f"one HGET inside a function, beyond entering it (a hash of {LARGE:,})": hget - empty,
        f"one HSET inside a function, beyond entering it (a hash of {LARGE:,})": hset - empty,
        f"a ZADD and its ZREM, beyond entering (a sorted set of {LARGE:,})": pair - empty,
    }


def trivial_mean(client: redis.Redis, n: int) -> float:
    sha = client.script_load(TRIVIAL)
    return server_mean(client, "evalsha", lambda: [client.evalsha(sha, 0) for _ in range(n)])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--rows", type=int, default=10_000, help="entries per sketch structure")
    args = parser.parse_args()
    n = args.calls
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        print(f"{args.server} {version}; {n:,} calls per operation, {ROUNDS} rounds\n")
        client.function_load(SKETCH, replace=True)
        fill_sketch(client, args.rows)
        client.config_set("slowlog-log-slower-than", -1)
        rounds: dict[str, list[float]] = {}

        def note(name: str, us: float) -> None:
            rounds.setdefault(name, []).append(us)

        for r in range(ROUNDS):
            base = (r + 1) * 10**6
            note("trivial script (EVALSHA)", trivial_mean(client, n))
            for name, us in parts(client, n).items():
                note(name, us)
            for name, us in sketch_lives(client, n, base, tokens=True).items():
                note(f"sketch: {name}", us)
            for name, us in sketch_lives(client, n, base + n, tokens=False).items():
                note(f"sketch without call tokens: {name}", us)
            store = RedisStore(client, tenant=f"floor-{r}")
            ours = unlogged(client, store, n)
            client.config_set("slowlog-log-slower-than", -1)
            for name in ("deliver", "claim_for", "unsubscribe", "arm", "disarm"):
                note(f"this library: {name}", ours[name])
            note("this library: event life", ours["event life"])
            note("this library: timer life", ours["timer life"])
            note("trivial script (EVALSHA)", trivial_mean(client, n))
        median = {name: statistics.median(v) for name, v in rounds.items()}
        trivial = median["trivial script (EVALSHA)"]
        print(
            "| server time, mean per call (INFO commandstats), median of the rounds | µs"
            " | times the trivial script | target |\n|---|---:|---:|---:|"
        )
        for name, us in median.items():
            life = name.split(": ")[-1]
            target = f"{TARGETS[life]} times" if life in TARGETS else ""
            print(f"| {name} | {us:.1f} | {us / trivial:.1f} | {target} |")

        floor = memory_floor(client, args.items)
        flush(client)
        ours_memory = memory(client, args.items)
        ours_memory["armed timer"] = ours_memory["armed timer, 20 per run"]
        print(
            f"\n| memory per item, {args.items:,} of each | target | fewest entries,"
            " measured | this library |\n|---|---:|---:|---:|"
        )
        for name, size in floor.items():
            print(f"| {name} | {MEMORY_TARGETS[name]} | {size:.0f} | {ours_memory[name]:.0f} |")
        walked = filled(client, args.items, walked_timer)
        print(
            f"| armed timer, held timers kept out of the walk | {MEMORY_TARGETS['armed timer']}"
            f" | {walked:.0f} | {ours_memory['armed timer']:.0f} |"
        )
        print(f"\n| one entry, {args.items:,} of them | bytes |\n|---|---:|")
        for name, size in entry_sizes(client, args.items).items():
            print(f"| {name} | {size:.0f} |")


if __name__ == "__main__":
    main()
