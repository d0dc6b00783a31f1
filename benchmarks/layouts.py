"""Memory per wait and per event of candidate key layouts, written directly.

    python benchmarks/layouts.py [--server valkey|redis] [--items 100000] [--only TEXT]

Each candidate writes the entries one registered wait (one correlation key of
its own, the ids of ``benchmarks/memory.py``) or one buffered event would hold,
with plain commands on a throwaway server, and the figure is ``used_memory``
grown over the items: an event's row without a payload, or carrying
``memory.py``'s payload with its bytes taken off (``CARRY_PAYLOAD``), as a
row over 64 bytes leaves a hash bucket's listpack. Buckets are sized as a grown
tenant's could be (``BUCKET_LOAD`` rows a hash bucket, ``ZSET_LOAD`` members a
sorted-set bucket, whose listpack holds 128). Beside each: whether every key a
call touches can be named by the client from the call's own ids (the rule of
``docs/keys.md``), or which operations would need a second round trip to learn
a bucket (``two-step``), or which operation it cannot serve at all (``no``:
a layout that keeps registration order only per run cannot page through the
tenant's, as ``waiting`` does, and one that keeps only each key's oldest wait
cannot elect the next).

The layouts differ in three choices: where the rows live (one tenant-wide
hash, or buckets by run / by event id), where the search indexes live (a
tenant-wide sorted set, a tenant-wide hash holding each key's oldest entry, or
buckets by key), and whether kinds and namespaces are interned to short ids.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from typing import Any

import redis
from targets import PAYLOAD, flush, server_version

from agentplane_redis.embedded import Server
from agentplane_redis.keys import bucket_hash

#: Rows a hash bucket holds on average (its listpack holds 512; fewer, larger
#: buckets cost a few bytes an item less than the timer buckets' 16).
BUCKET_LOAD = 128
#: Members a sorted-set bucket holds on average (its listpack holds 128).
ZSET_LOAD = 48
#: Rows a wait bucket holds on average (split at 160, while the next holds 64).
WAIT_LOAD = 96
#: Members a time bucket holds, the span following the rate (48 to 64).
TIME_LOAD = 56
INSTANT = 10**15 + 1767225600000
#: ``memory.py``'s payload as a row holds it. A candidate whose rows carry it
#: (``CARRY_PAYLOAD``) has its bytes taken off, as ``memory.py`` does; the others
#: write rows without one.
PAYLOAD_JSON = json.dumps(PAYLOAD, separators=(",", ":")).encode()


def inst(i: int) -> bytes:
    return b"%016d" % (INSTANT + i)


def wait_ids(i: int, interned: bool) -> dict[str, bytes]:
    run = b"run-%d " % i
    return {
        "run": run,
        "wid": run + b"await-payment ",
        "kind": b"k1 " if interned else b"payment.settled ",
        "nv": (b"n1 " if interned else b"order ") + b"A-%d " % i,
        "at": inst(i),
    }


def event_ids(i: int, interned: bool) -> dict[str, bytes]:
    return {
        "eid": b"stripe evt_%d " % i,
        "kind": b"k1 " if interned else b"payment.settled ",
        "source": b"stripe ",
        "nv": (b"n1 " if interned else b"order ") + b"A-%d " % i,
        "at": inst(i),
    }


def bucket(name: str, of: bytes, items: int, load: int) -> str:
    return f"{name}:{bucket_hash(of.decode()) % max(1, items // load)}"


Writer = Callable[[Any, int, int], None]


def w_today_like(p: Any, i: int, n: int) -> None:
    """Tenant-wide: row hash, key rows, registration order, election (skiplists)."""
    w = wait_ids(i, False)
    p.hset("wait", w["wid"], b"2:w1,15:payment.settled,1:0,7:forward,0:,0:,")
    p.zadd("wait:key", {w["wid"] + w["nv"] + w["at"]: 0})
    p.zadd("wait:order", {w["at"] + w["wid"] + w["nv"]: 0})
    p.zadd("wait:match", {w["kind"] + w["nv"] + w["at"] + w["wid"]: 0})


def _w_row(w: dict[str, bytes]) -> bytes:
    return w["kind"] + b" 0f " + w["nv"] + w["at"]


def w_declared(p: Any, i: int, n: int, interned: bool = False) -> None:
    """One round trip everywhere: tenant-wide rows holding their keys, the election
    as a tenant-wide hash of each key's oldest wait, order in run buckets."""
    w = wait_ids(i, interned)
    p.hset("wait", w["wid"], _w_row(w))
    p.hset("wait:head", w["kind"] + b" " + w["nv"], w["at"] + w["wid"])
    p.zadd(bucket("wait:order", w["run"], n, ZSET_LOAD), {w["at"] + w["wid"] + w["nv"]: 0})


def w_declared_interned(p: Any, i: int, n: int) -> None:
    """As w_declared, kinds and namespaces interned to short ids."""
    w_declared(p, i, n, True)


def w_declared_zset(p: Any, i: int, n: int) -> None:
    """As w_declared, with the election a tenant-wide sorted set."""
    w = wait_ids(i, False)
    p.hset("wait", w["wid"], _w_row(w))
    p.zadd("wait:match", {w["kind"] + w["nv"] + w["at"] + w["wid"]: 0})
    p.zadd(bucket("wait:order", w["run"], n, ZSET_LOAD), {w["at"] + w["wid"] + w["nv"]: 0})


def w_attrs_in_key_rows(p: Any, i: int, n: int) -> None:
    """Tenant-wide, no row hash: each key row carries the wait's attributes, so
    the per-wait read of key rows is its attribute read too."""
    w = wait_ids(i, False)
    p.zadd("wait:key", {w["wid"] + w["kind"] + b"0f  " + w["nv"] + w["at"]: 0})
    p.zadd("wait:order", {w["at"] + w["wid"] + w["nv"]: 0})
    p.zadd("wait:match", {w["kind"] + w["nv"] + w["at"] + w["wid"]: 0})


def w_election_carries(p: Any, i: int, n: int) -> None:
    """A wait's row (attributes and keys) in a hash bucket of its run; the
    election entry carries the attributes and every key of its wait, so deliver
    needs no row; order tenant-wide. parked_waits, waiting and erase_payload of a
    held event (which unparks its holder) learn the runs' buckets in a first step."""
    w = wait_ids(i, False)
    p.hset(
        bucket("wait", w["run"], n, BUCKET_LOAD), w["wid"], w["kind"] + b"0f  " + w["nv"] + w["at"]
    )
    p.zadd("wait:order", {w["at"] + w["wid"] + w["nv"]: 0})
    p.zadd("wait:match", {w["kind"] + w["nv"] + w["at"] + w["wid"] + b"0f  " + w["nv"]: 0})


def w_rows_wide(p: Any, i: int, n: int) -> None:
    """Tenant-wide rows (so deliver reads its winner's), election heads in key
    buckets and order in run buckets, interned: unsubscribe, close and seal (the
    election buckets of the wait's keys) need a second step."""
    w = wait_ids(i, True)
    p.hset("wait", w["wid"], _w_row(w))
    field = w["kind"] + b" " + w["nv"]
    p.hset(bucket("wait:head", field, n, BUCKET_LOAD), field, w["at"] + w["wid"])
    p.zadd(bucket("wait:order", w["run"], n, ZSET_LOAD), {w["at"] + w["wid"] + w["nv"]: 0})


def w_run_buckets(p: Any, i: int, n: int) -> None:
    """A wait's row (attributes, keys, created_at: a hash field, as a key row of
    over 64 bytes would take its sorted-set bucket out of its listpack) and its
    registration order in buckets of its run, every call that names a run naming
    them; the election
    tenant-wide, each entry carrying the attributes, so that deliver needs no row
    of a one-key winner. A winner of several keys (deliver, match_waiter, revive),
    parked_waits, waiting (through each bucket's oldest entry) and erase_payload
    of a held event learn the runs' buckets in a first step."""
    w = wait_ids(i, False)
    attrs = w["kind"] + b"0f  "
    p.hset(bucket("wait", w["run"], n, BUCKET_LOAD), w["wid"], attrs + w["nv"] + w["at"])
    p.zadd(bucket("wait:order", w["run"], n, ZSET_LOAD), {w["at"] + w["wid"] + w["nv"]: 0})
    p.zadd("wait:match", {w["kind"] + w["nv"] + w["at"] + w["wid"] + b"0f  ": 0})


def w_bucketed(p: Any, i: int, n: int, interned: bool = False) -> None:
    """Rows in run buckets, election heads in key buckets, order in run buckets:
    deliver (the winner's row), unsubscribe, close and seal (the election
    buckets of the wait's keys) need a second step."""
    w = wait_ids(i, interned)
    p.hset(bucket("wait", w["run"], n, BUCKET_LOAD), w["wid"], _w_row(w))
    field = w["kind"] + b" " + w["nv"]
    p.hset(bucket("wait:head", field, n, BUCKET_LOAD), field, w["at"] + w["wid"])
    p.zadd(bucket("wait:order", w["run"], n, ZSET_LOAD), {w["at"] + w["wid"] + w["nv"]: 0})


def w_bucketed_interned(p: Any, i: int, n: int) -> None:
    """As w_bucketed, kinds and namespaces interned to short ids."""
    w_bucketed(p, i, n, True)


def _key_hash(e: dict[str, bytes]) -> bytes:
    """A correlation key's (kind, namespace, value) as 16 hex digits: a member
    prefix short enough that a bucket's members stay within 64 bytes."""
    return hashlib.blake2b(e["kind"] + e["nv"], digest_size=8).hexdigest().encode()


def w_election_in_key_buckets(p: Any, i: int, n: int) -> None:
    """The layout before the time buckets: key rows (each carrying its wait's
    attributes) and registration order tenant-wide; the election entry in the key
    bucket of (kind, key), its member the key's hash (8 hex digits), "~", no
    sender, created_at and the wait's id."""
    w = wait_ids(i, False)
    p.zadd("wait:key", {w["wid"] + w["kind"] + b"0f  " + w["nv"] + w["at"]: 0})
    p.zadd("wait:order", {w["at"] + w["wid"] + w["nv"]: 0})
    h = bucket_hash(w["kind"] + w["nv"])
    p.zadd(f"event:key:{h % max(1, n // 16)}", {b"%08x~ " % h + w["at"] + w["wid"]: 0})


def w_wait_buckets(p: Any, i: int, n: int) -> None:
    """The shipped layout (``docs/keys.md``): the wait's row (attributes, then each
    key and its created_at) a field of the wait bucket of its run (``WAIT_LOAD``
    rows a bucket); the election entry in the key bucket of (kind, key); one
    registration order member, the wait's id, in the time buckets of created_at."""
    w = wait_ids(i, False)
    row = w["kind"] + b"0f  " + w["nv"] + w["at"]
    p.hset(bucket("wait", w["run"], n, WAIT_LOAD), w["wid"], row)
    h = bucket_hash(w["kind"] + w["nv"])
    p.zadd(f"event:key:{h % max(1, n // 16)}", {b"%08x~ " % h + w["at"] + w["wid"]: 0})
    _time_entry(p, "wait:order", w["wid"], i)


def w_election_bucketed(p: Any, i: int, n: int) -> None:
    """The layout before the wait buckets: key rows (each carrying its wait's
    attributes), tenant-wide; the election entry in the key bucket of (kind,
    key); registration order in time buckets of created_at (``TIME_LOAD`` waits
    a bucket, one index entry and one count a bucket), each member the wait's id
    and key scored by its instant within the bucket."""
    w = wait_ids(i, False)
    p.zadd("wait:key", {w["wid"] + w["kind"] + b"0f  " + w["nv"] + w["at"]: 0})
    h = bucket_hash(w["kind"] + w["nv"])
    p.zadd(f"event:key:{h % max(1, n // 16)}", {b"%08x~ " % h + w["at"] + w["wid"]: 0})
    _time_entry(p, "wait:order", w["wid"] + w["nv"], i)


def _time_entry(p: Any, family: str, member: bytes, i: int) -> None:
    """A member of item i in the time buckets of ``family``, one item a millisecond."""
    start = i - i % TIME_LOAD
    if i == start:
        p.zadd(f"{family}:index", {b"%016d" % start: 0})
        p.hset(family, b"%016d" % start, TIME_LOAD)
    p.zadd(f"{family}:{start}", {member: i - start})


def e_today_like(p: Any, i: int, n: int) -> None:
    """Tenant-wide: row, payload field, live, live by key, live by sender."""
    e = event_ids(i, False)
    p.hset(
        "event",
        e["eid"],
        b"2:e1,4:live,6:stripe,9:evt_%06d,15:payment.settled," % i
        + b"13:1767225600000,0:,0:,0:,0:,0:,0:,1:0,1:0,5:order,8:A-%06d," % i,
    )
    p.hset("payload", e["eid"], b"")
    p.zadd("event:live", {e["at"] + e["eid"]: 0})
    p.zadd("event:live:key", {e["kind"] + e["nv"] + e["at"] + e["eid"]: 0})
    p.zadd("event:live:sender", {e["kind"] + e["source"] + e["nv"] + e["at"] + e["eid"]: 0})


def _e_row(e: dict[str, bytes]) -> bytes:
    return b"L" + e["at"] + e["kind"] + e["nv"]


def e_tenant_wide_interned(p: Any, i: int, n: int) -> None:
    """The shipped entries (a row holding its payload, the live order, one claim
    index grouped by sender, all tenant-wide), with a row as compact as the other
    candidates' and kinds and namespaces interned."""
    e = event_ids(i, True)
    p.hset("event", e["eid"], _e_row(e) + b"|")
    p.zadd("event:live", {e["at"] + e["eid"]: 0})
    p.zadd("event:live:key", {e["kind"] + e["nv"] + e["source"] + e["at"] + e["eid"]: 0})


def e_tenant_wide(p: Any, i: int, n: int) -> None:
    """The entries before key buckets: a row under the event's id holding its
    payload, the live order and one claim-search index grouped by sender, all
    tenant-wide."""
    e = event_ids(i, False)
    p.hset("event", e["eid"], b"L-- " + e["at"] + b" " + e["kind"] + b"   " + e["nv"] + b"\n")
    p.zadd("event:live", {e["at"] + e["eid"]: 0})
    p.zadd("event:live:key", {e["kind"] + e["nv"] + e["source"] + e["at"] + e["eid"]: 0})


def e_live_scored(p: Any, i: int, n: int) -> None:
    """As e_tenant_wide, the live order scored by received_at with the event's id as
    its member (a listing then resumes after a member of the same score by its
    rank, or by reading that score's members)."""
    e = event_ids(i, False)
    p.hset("event", e["eid"], b"L-- " + e["at"] + b" " + e["kind"] + b"   " + e["nv"] + b"\n")
    p.zadd("event:live", {e["eid"]: int(e["at"]) - 10**15})
    p.zadd("event:live:key", {e["kind"] + e["nv"] + e["source"] + e["at"] + e["eid"]: 0})


def e_declared(p: Any, i: int, n: int) -> None:
    """A tenant-wide compact row (payload beside it), one claim-search index in key
    buckets (sender filtered on the row), the sweep's order in eid buckets: the
    sweep, erase_payload and release (the buckets of the event's keys) and
    claim_for, wait and deliver (the bucket of the event found) need a second step."""
    e = event_ids(i, False)
    p.hset("event", e["eid"], _e_row(e))
    p.hset("payload", e["eid"], b"")
    key = e["kind"] + e["nv"]
    p.zadd(bucket("event:live:key", key, n, ZSET_LOAD), {key + e["at"] + e["eid"]: 0})
    p.zadd(bucket("event:live", e["eid"], n, ZSET_LOAD), {e["at"] + e["eid"]: 0})


def e_declared_inline(p: Any, i: int, n: int) -> None:
    """As e_declared, with the payload in the row's own hash value (one tenant-wide
    entry per event instead of two)."""
    e = event_ids(i, True)
    p.hset("event", e["eid"], _e_row(e) + b"|")
    key = e["kind"] + e["nv"]
    p.zadd(bucket("event:live:key", key, n, ZSET_LOAD), {key + e["at"] + e["eid"]: 0})
    p.zadd(bucket("event:live", e["eid"], n, ZSET_LOAD), {e["at"] + e["eid"]: 0})


def e_bucketed(p: Any, i: int, n: int, interned: bool = False) -> None:
    """Rows and payloads in eid buckets, the claim search and the sweep's order in
    buckets: claim_for, wait and deliver (the found row), release and sweep (the
    keys' buckets) need a second step."""
    e = event_ids(i, interned)
    p.hset(bucket("event", e["eid"], n, BUCKET_LOAD), e["eid"], _e_row(e))
    key = e["kind"] + e["nv"]
    p.zadd(bucket("event:live:key", key, n, ZSET_LOAD), {key + e["at"] + e["eid"]: 0})
    p.zadd(bucket("event:live", e["eid"], n, ZSET_LOAD), {e["at"] + e["eid"]: 0})


def e_bucketed_interned(p: Any, i: int, n: int) -> None:
    """As e_bucketed, kinds and namespaces interned to short ids."""
    e_bucketed(p, i, n, True)


def _e_shipped_row(e: dict[str, bytes]) -> bytes:
    return b"L-- " + e["at"] + b" " + e["kind"] + b"   " + e["nv"] + b"\n" + PAYLOAD_JSON


def _search_entry(p: Any, e: dict[str, bytes], i: int, n: int) -> None:
    h = _key_hash(e)
    member = h + b" " + e["source"] + e["at"] + b"evt_%d " % i
    p.zadd(f"event:key:{int(h, 16) % max(1, n // ZSET_LOAD)}", {member: 0})


def e_search_bucketed(p: Any, i: int, n: int) -> None:
    """The shipped row, its payload in it, and the live order, tenant-wide; the
    claim search in buckets by a hash of (kind, key), each member that hash's 16
    hex digits, source, received_at and id (within 64 bytes, so a bucket stays a
    listpack). A call that removes entries of keys it was not given (a claim of
    an event with several keys, erase_payload, the sweep, a release, revive)
    learns their buckets in a first step."""
    e = event_ids(i, False)
    p.hset("event", e["eid"], _e_shipped_row(e))
    p.zadd("event:live", {e["at"] + e["eid"]: 0})
    _search_entry(p, e, i, n)


def e_orders_bucketed(p: Any, i: int, n: int) -> None:
    """The shipped layout (``docs/keys.md``): as e_search_bucketed, the live
    order in time buckets of received_at (``TIME_LOAD`` events a bucket, one
    index entry and one count a bucket), each member the event's id scored by
    its instant within the bucket."""
    e = event_ids(i, False)
    p.hset("event", e["eid"], _e_shipped_row(e))
    _time_entry(p, "event:live", e["eid"], i)
    _search_entry(p, e, i, n)


def e_bucketed_payload(p: Any, i: int, n: int) -> None:
    """As e_bucketed, each row carrying its payload: a row over 64 bytes
    (``hash-max-listpack-value``) turns its bucket into a hash table."""
    e = event_ids(i, False)
    p.hset(bucket("event", e["eid"], n, BUCKET_LOAD), e["eid"], _e_row(e) + PAYLOAD_JSON)
    key = e["kind"] + e["nv"]
    p.zadd(bucket("event:live:key", key, n, ZSET_LOAD), {key + e["at"] + e["eid"]: 0})
    p.zadd(bucket("event:live", e["eid"], n, ZSET_LOAD), {e["at"] + e["eid"]: 0})


#: The candidates whose rows carry ``PAYLOAD_JSON``.
CARRY_PAYLOAD = {e_search_bucketed, e_orders_bucketed, e_bucketed_payload}


#: name -> (writer, one round trip for every operation, target bytes).
LAYOUTS: dict[str, tuple[Writer, str, int]] = {
    "wait: today's entries": (w_today_like, "yes", 200),
    "wait: rows + head hash, tenant-wide; order in buckets": (w_declared, "no", 200),
    "wait: the same, interned": (w_declared_interned, "no", 200),
    "wait: rows + election zset, tenant-wide; order in buckets": (w_declared_zset, "no", 200),
    "wait: attributes in the key rows, no row hash": (w_attrs_in_key_rows, "yes", 200),
    "wait: rows in run buckets, election entries carrying the wait": (
        w_election_carries,
        "two-step",
        200,
    ),
    "wait: key rows and order in run buckets, election tenant-wide": (
        w_run_buckets,
        "two-step",
        200,
    ),
    "wait: rows tenant-wide, the rest in buckets, interned": (w_rows_wide, "two-step", 200),
    "wait: all in buckets": (w_bucketed, "two-step", 200),
    "wait: key rows and order; election in key buckets (before time buckets)": (
        w_election_in_key_buckets,
        "two-step",
        200,
    ),
    "wait: key rows; election in key buckets, order in time buckets (before wait buckets)": (
        w_election_bucketed,
        "two-step",
        200,
    ),
    "wait: rows in wait buckets by run; election in key buckets; order per wait (shipped)": (
        w_wait_buckets,
        "two-step",
        200,
    ),
    "wait: all in buckets, interned": (w_bucketed_interned, "two-step", 200),
    "event: row, payload field, three sorted sets (2026-12-03)": (e_today_like, "yes", 250),
    "event: all tenant-wide (before key buckets)": (e_tenant_wide, "yes", 250),
    "event: the same, the live order scored by received_at": (e_live_scored, "yes", 250),
    "event: all tenant-wide, a compact row, interned": (e_tenant_wide_interned, "yes", 250),
    "event: row tenant-wide; indexes in buckets": (e_declared, "two-step", 250),
    "event: the same, payload in the row, interned": (e_declared_inline, "two-step", 250),
    "event: all in buckets": (e_bucketed, "two-step", 250),
    "event: all in buckets, interned": (e_bucketed_interned, "two-step", 250),
    "event: all in buckets, rows carrying the payload": (e_bucketed_payload, "two-step", 250),
    "event: the row; claim search in key buckets (before time buckets)": (
        e_search_bucketed,
        "two-step",
        250,
    ),
    "event: the row; claim search in key buckets, live order in time buckets (shipped)": (
        e_orders_bucketed,
        "two-step",
        250,
    ),
}


def per_item(client: redis.Redis, write: Writer, items: int) -> float:
    flush(client)
    before = int(client.info("memory")["used_memory"])
    pipe = client.pipeline(transaction=False)
    for i in range(items):
        write(pipe, i, items)
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    grown = (int(client.info("memory")["used_memory"]) - before) / items
    return grown - (len(PAYLOAD_JSON) if write in CARRY_PAYLOAD else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="redis")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--only", default="", help="the layouts whose names hold this text")
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(f"{args.server} {server_version(client)}, {args.items:,} items\n")
        print("| layout | bytes per item | target | one round trip |")
        print("|---|---:|---:|---|")
        for name, (write, trips, target) in LAYOUTS.items():
            if args.only not in name:
                continue
            print(f"| {name} | {per_item(client, write, args.items):.0f} | {target} | {trips} |")


if __name__ == "__main__":
    main()
