"""Timer and key buckets grow with the tenant (docs/keys.md, "Timer buckets",
"Key buckets"), over every backend and flavour: rows move by linear hashing, a
store that learned an older geometry is told the new one and calls again,
nothing is lost or found twice."""

from __future__ import annotations

import pytest
from audit import Audit

from agentplane_redis import Resumed
from agentplane_redis.keys import (
    BUCKET_BASE,
    BUCKET_LOAD,
    Geometry,
    bucket_hash,
    key_hash,
    tuple_member,
)

from helpers import at, ev, paged, sub, timer

#: Runs whose names need escaping or are not ASCII, hashed as their UTF-8.
ODD = ["a b", "x!y", "naïve", "日本", "tab\there", "q'uote"]


def runs(n: int) -> list[str]:
    return [*ODD, *(f"run-{i}" for i in range(n - len(ODD)))]


def geometry(raw, store) -> Geometry:
    stored = raw.hget(store.keys.key("geometry"), "timer")
    return Geometry.parse(stored) if stored else Geometry()


def test_the_hash_and_the_bucket_of_a_run():
    """h = (h * 131 + byte) mod 4294967291 over the UTF-8; below `split` the next level's."""
    assert bucket_hash("") == 0
    assert bucket_hash("a") == 97
    assert bucket_hash("ab") == 97 * 131 + 98
    assert bucket_hash("é") == (0xC3 * 131 + 0xA9)
    g = Geometry(1, 3)
    assert g.count == 2 * BUCKET_BASE + 3
    for run in runs(200):
        h = bucket_hash(run)
        low = h % (2 * BUCKET_BASE)
        assert g.bucket(run) == (h % (4 * BUCKET_BASE) if low < 3 else low)
        assert g.bucket(run) < g.count


def test_buckets_split_as_timers_are_armed_and_every_timer_stays_found(store, make, raw, backend):
    """Past BUCKET_LOAD timers a bucket on average, arming splits buckets one by one;
    each row sits in its run's bucket, and a store that never saw a split finds,
    lists, arms and disarms through the new buckets."""
    stale = make(backend.tenant)  # learns nothing until the buckets have split
    names = runs(3 * BUCKET_BASE * BUCKET_LOAD)
    for i, run in enumerate(names):
        assert store.timers.arm(timer(run, "t", i))
    assert store.timers.arm(timer("run-0", "second", 5))
    g = geometry(raw, store)
    assert g.count > BUCKET_BASE
    assert store.geometry == g  # the store learned each split it made
    sizes = [raw.hlen(k) for k in store.keys.timer_buckets(g)]
    assert sum(sizes) == len(names) + 1
    assert max(sizes) <= 512  # each stays a listpack (hash-max-listpack-entries)
    Audit(raw, backend.tenant).timers()

    moved = [run for run in names if g.bucket(run) != Geometry().bucket(run)]
    assert moved
    assert stale.geometry == Geometry()
    assert [t.effect for t in stale.timers.armed(moved[0])] == ["t"]
    assert stale.geometry == g  # told BUCKETS, it called again with the new ones
    other = make(backend.tenant)
    assert other.timers.lookup("日本", "t") is not None
    assert not other.timers.arm(timer("a b", "t", 0))  # first arming wins, in its bucket
    third = make(backend.tenant)
    assert third.timers.disarm_many([(run, "t") for run in names[:40]]) == 40
    fourth = make(backend.tenant)
    assert fourth.timers.disarm("x!y", "t") is False  # gone above
    assert fourth.timers.disarm_run("run-0") == 1
    assert store.timers.pending_count() == len(names) + 1 - 40 - 1
    left = [run for run in names[40:] if run != "run-0"]
    went = next(run for run in left if g.bucket(run) != Geometry().bucket(run))
    stayed = next(run for run in left if g.bucket(run) == Geometry().bucket(run))
    fifth = make(backend.tenant)
    assert fifth.timers.disarm(went, "t") is True  # not in its old bucket: BUCKETS, found
    assert fifth.geometry == g
    sixth = make(backend.tenant)
    assert sixth.timers.disarm(stayed, "t") is True  # found where the old geometry says
    assert sixth.geometry == Geometry()  # a row found proves its bucket: no BUCKETS
    assert sixth.timers.lookup(went, "t") is None  # not found: told BUCKETS, then none
    assert store.timers.pending_count() == len(names) + 1 - 40 - 1 - 2
    Audit(raw, backend.tenant).timers()


def test_a_sealed_runs_timers_are_retired_from_grown_buckets(store, make, raw, backend):
    """claim_due's RETIRE step asks for a sealed run's bucket under the current geometry."""
    names = runs(3 * BUCKET_BASE * BUCKET_LOAD)
    for i, run in enumerate(names):
        store.timers.arm(timer(run, "t", i))
    g = geometry(raw, store)
    sealed = next(run for run in names if g.bucket(run) != Geometry().bucket(run))
    stale = make(backend.tenant)
    assert stale.runs.seal(sealed)
    stale = make(backend.tenant)
    claimed = stale.timers.claim_due(now=at(10**6), limit=5000)
    assert len(claimed) == len(names) - 1
    assert stale.timers.lookup(sealed, "t") is None
    assert stale.geometry == geometry(raw, store)
    Audit(raw, backend.tenant).timers()


def key_geometry(raw, store) -> Geometry:
    stored = raw.hget(store.keys.key("geometry"), "key")
    return Geometry.parse(stored) if stored else Geometry()


def test_wait_buckets_split_as_waits_register_and_every_wait_stays_found(store, make, raw, backend):
    """Past 64 waits a bucket on average, registering splits wait buckets one by
    one; each row sits in its run's bucket, and stores that never saw a split
    look up, list, retire and resume waits through the new buckets, learning the
    geometry (NEED) before anything is written."""
    stale = [make(backend.tenant) for _ in range(4)]
    names = runs(3 * BUCKET_BASE * 64)
    for i, run in enumerate(names):
        store.events.subscribe(sub(run, "w", f"k/{i}"), at=at(i))
    stored = raw.hget(store.keys.key("geometry"), "wait")
    g = Geometry.parse(stored) if stored else Geometry()
    assert g.count > BUCKET_BASE
    assert store.wait_geometry == g  # it named the buckets each split writes
    sizes = [raw.hlen(k) for k in store.keys.wait_buckets(g)]
    assert sum(sizes) == len(names)
    assert max(sizes) <= 512  # each stays a listpack (hash-max-listpack-entries)
    Audit(raw, backend.tenant).run()

    moved = [i for i, run in enumerate(names) if g.bucket(run) >= BUCKET_BASE]
    assert moved
    found = stale[0].events.lookup_wait(names[moved[0]], "w")
    assert found is not None
    assert found.subscription.correlation[0].value == str(moved[0])
    assert stale[0].wait_geometry == g
    resumed = stale[1].events.deliver(ev("e1", f"k/{moved[1]}"), at=at(10**6))
    assert resumed.subscription.run == names[moved[1]]
    stale[2].events.unsubscribe(names[moved[2]], "w")
    assert stale[3].events.lookup_wait(names[moved[2]], "w") is None
    assert store.events.stats().waits == len(names) - 1
    listed = make(backend.tenant).events.waiting(limit=1000)  # through NEED, every bucket
    left = [str(i) for i in range(len(names)) if i != moved[2]]
    assert [w.correlation[0].value for w in listed] == left[:1000]
    Audit(raw, backend.tenant).run()


def test_key_buckets_split_as_events_arrive_and_every_event_stays_found(store, make, raw, backend):
    """Past BUCKET_LOAD live events a bucket on average, buffering splits key buckets
    one by one; each entry sits in its key's bucket, and stores that never saw a
    split claim, erase, sweep and release through the new buckets, learning the
    buckets of an event's further keys (NEED) before anything is written."""
    stale = [make(backend.tenant) for _ in range(4)]
    values = runs(3 * BUCKET_BASE * BUCKET_LOAD)
    for i, value in enumerate(values):
        assert store.events.buffer(ev(f"e{i}", f"k/{value}"), at=at(i))
    g = key_geometry(raw, store)
    assert g.count > BUCKET_BASE
    assert store.key_geometry != Geometry()  # told NEED when a split outran it
    sizes = [raw.zcard(k) for k in store.keys.key_buckets(g)]
    assert sum(sizes) == len(values)
    assert max(sizes) <= 128  # each stays a listpack (zset-max-listpack-entries)
    Audit(raw, backend.tenant).run()

    moved = [v for v in values if g.bucket_of(key_hash("paid", "k", v)) >= BUCKET_BASE]
    assert moved
    found = stale[0].events.claim_for(sub("r0", "w", f"k/{moved[0]}"), at=at(10**6))
    assert found is not None
    assert found.event.id == f"e{values.index(moved[0])}"
    assert stale[0].key_geometry == g
    # An event of three keys, claimed through one: its other keys' entries go too.
    many = ev("many", *(f"k/{v}" for v in moved[1:4]))
    assert store.events.buffer(many, at=at(-1))
    assert stale[1].events.claim_for(sub("r1", "w", f"k/{moved[2]}")).event.id == "many"
    Audit(raw, backend.tenant).run()
    # Released (an unanswered claim of a concluded run), it is live again under all three.
    retired = stale[2].events.unsubscribe_run("r1", ["w"])
    assert [e.id for e in retired.released] == ["many"]
    Audit(raw, backend.tenant).run()
    assert stale[3].events.erase_payload("src", "many") is True
    assert make(backend.tenant).events.sweep_unclaimed(at(10**7)) == len(values) - 1
    assert make(backend.tenant).events.stats().live == 0
    Audit(raw, backend.tenant).run()
    dead = next(f"e{i}" for i, v in enumerate(values) if v != moved[0])
    assert make(backend.tenant).events.revive("src", dead) is not None  # live again
    Audit(raw, backend.tenant).run()


def test_a_claim_search_passes_over_another_key_of_the_same_hash(store, raw, backend):
    """Two keys whose hashes collide share their bucket's entries; a search under
    one never hands out the other's event, with or without a sender."""
    a, b = "A-7000408", "A-30689030"
    assert key_hash("paid", "order", a) == key_hash("paid", "order", b)
    assert store.events.buffer(ev("b-old", f"order/{b}"), at=at(0))
    assert store.events.buffer(ev("a-new", f"order/{a}"), at=at(1))
    assert store.events.buffer(ev("b-new", f"order/{b}", source="other"), at=at(2))
    wanted = sub("r", "w", f"order/{a}")
    assert store.events.claim_for(wanted).event.id == "a-new"
    assert store.events.claim_for(sub("s", "w", f"order/{a}")) is None
    by_sender = sub("t", "w", f"order/{b}", from_source="src")
    assert store.events.claim_for(by_sender).event.id == "b-old"
    outcome = store.events.deliver(ev("a-2", f"order/{a}"), at=at(3))
    assert not isinstance(outcome, Resumed)
    assert store.events.claim_for(sub("u", "w", f"order/{b}")).event.id == "b-new"
    Audit(raw, backend.tenant).run()


def test_an_election_passes_over_a_wait_of_another_key_of_the_same_hash(store, raw, backend):
    """A wait under a key whose hash another key shares is never elected for an
    event of the other key, though its election entry is older and sits beside."""
    a, b = "A-7000408", "A-30689030"
    store.events.subscribe(sub("older", "w", f"order/{b}"), at=at(0))
    store.events.subscribe(sub("newer", "w", f"order/{a}"), at=at(1))
    outcome = store.events.deliver(ev("for-a", f"order/{a}"), at=at(2))
    assert isinstance(outcome, Resumed)
    assert outcome.subscription.run == "newer"
    assert not isinstance(store.events.deliver(ev("for-a-2", f"order/{a}"), at=at(3)), Resumed)
    outcome = store.events.deliver(ev("for-b", f"order/{b}"), at=at(4))
    assert isinstance(outcome, Resumed)
    assert outcome.subscription.run == "older"
    Audit(raw, backend.tenant).run()


# ------------------------------------------------------------ live buckets


def live_buckets(raw, store) -> dict[bytes, int]:
    """Each live bucket's start and its entries (left rows included), oldest first."""
    starts = raw.zrangebylex(store.keys.key("live_index"), b"-", b"(~")  # not the sentinel
    return {s: raw.zcard(store.keys.live_bucket(s.decode())) for s in starts}


def set_span(raw, store, j: int, family: str = "live") -> None:
    """Sets a time bucket family's span exponent (its geometry field: the span,
    then the newest bucket's start and end if any)."""
    stored = raw.hget(store.keys.key("geometry"), family) or b"10"
    raw.hset(store.keys.key("geometry"), family, b" ".join([b"%d" % j, *stored.split(b" ")[1:]]))


def left(raw, store, start: bytes, counts: str = "live") -> int:
    """How many members the left list of the bucket at start holds."""
    return (raw.hget(store.keys.key(counts), b"g" + start) or b"").count(b"\n")


def test_live_buckets_hold_the_live_order_in_spans_that_follow_the_rate(store, raw, backend):
    """Events buffered at one a millisecond open buckets of a few dozen each: the
    span shrinks from a second as the first bucket fills; a burst into a long
    span shrinks it at once. Every bucket stays a listpack's size, the audit
    checks each entry is in the bucket of its instant, and a sweep takes them
    all, oldest first."""
    for i in range(1500):
        assert store.events.buffer(ev(f"e{i}", f"k/{i}"), at=at(i))
    sizes = live_buckets(raw, store)
    assert sum(sizes.values()) == 1500
    assert max(sizes.values()) <= 128  # zset-max-listpack-entries
    assert len(sizes) <= 1500 // 24
    Audit(raw, backend.tenant).run()
    # A span of 2^30 ms, and a burst of one event a millisecond: one bucket fills
    # to LIVE.FULL, then the span shrinks to hold about 64, and buckets open.
    set_span(raw, store, 30)
    for i in range(600):
        assert store.events.buffer(ev(f"b{i}", f"k/{i}"), at=at(10**7 + i))
    burst = [n for s, n in live_buckets(raw, store).items() if int(s) >= 10**15 + 10**6]
    assert max(burst) <= 128
    assert len(burst) >= 4
    assert int(raw.hget(store.keys.key("geometry"), "live").split()[0]) <= 7
    Audit(raw, backend.tenant).run()
    assert store.events.oldest_live() == at(0)
    assert store.events.sweep_unclaimed(at(10**7 - 1)) == 1500
    assert store.events.oldest_live() == at(10**7)
    Audit(raw, backend.tenant).run()


def test_events_claimed_from_a_bucket_not_named_are_dropped_sixteen_at_a_time(
    store, make, raw, backend
):
    """A claim that cannot name its event's live bucket lists the event as left;
    the sixteenth such, or the one that leaves the bucket with no live event, has
    the store name the bucket, and its call drops the listed entries. In between,
    every reader passes over them."""
    set_span(raw, store, 20)  # one bucket for what follows
    for i in range(40):
        assert store.events.buffer(ev(f"e{i:02}", f"k/{i}"), at=at(i))
    (start,) = live_buckets(raw, store)
    store = make(backend.tenant)  # one that never learned where the bucket is
    for i in range(15):
        got = store.events.claim_for(sub(f"r{i}", "w", f"k/{i}"), at=at(10**8))
        assert got.event.id == f"e{i:02}"
    assert live_buckets(raw, store) == {start: 40}
    assert left(raw, store, start) == 15
    Audit(raw, backend.tenant).run()
    assert store.events.stats().live == 25
    assert store.events.oldest_live() == at(15)
    page, _ = store.events.live_page(5)
    assert [e.event.id for e in page] == [f"e{i:02}" for i in range(15, 20)]
    assert store.events.claim_for(sub("r15", "w", "k/15"), at=at(10**8)) is not None
    assert live_buckets(raw, store) == {start: 24}  # the sixteenth: all dropped
    assert left(raw, store, start) == 0
    Audit(raw, backend.tenant).run()
    for i in range(16, 40):
        assert store.events.claim_for(sub(f"r{i}", "w", f"k/{i}"), at=at(10**8)) is not None
    assert live_buckets(raw, store) == {}  # the last live event left: the bucket went
    assert store.events.stats().live == 0
    Audit(raw, backend.tenant).run()


def test_an_event_back_before_its_bucket_was_tidied_comes_off_the_left_list(
    store, make, raw, backend
):
    """An event claimed (listed as left) and released by unsubscribe_run is live
    again in the same entry, off the list; the sweep passes over what is still
    listed, and takes the rest."""
    set_span(raw, store, 20)
    for i in range(5):
        assert store.events.buffer(ev(f"e{i}", f"k/{i}"), at=at(i))
    (start,) = live_buckets(raw, store)
    store = make(backend.tenant)  # one that never learned where the bucket is
    assert store.events.claim_for(sub("r0", "w", "k/0"), at=at(10**8)) is not None
    assert store.events.claim_for(sub("r1", "w", "k/1"), at=at(10**8)) is not None
    assert left(raw, store, start) == 2
    retired = store.events.unsubscribe_run("r0", ["w"])
    assert [e.id for e in retired.released] == ["e0"]
    assert left(raw, store, start) == 1
    Audit(raw, backend.tenant).run()
    assert [e.event.id for e in store.events.live_page()[0]] == ["e0", "e2", "e3", "e4"]
    assert store.events.sweep_unclaimed(at(3)) == 3  # e0, e2, e3; e1 is held
    assert live_buckets(raw, store) == {start: 1}
    Audit(raw, backend.tenant).run()


def test_events_received_out_of_order_join_the_bucket_of_their_instant(store, raw, backend):
    """An event received before every bucket opens one before them; one between
    two buckets joins the earlier; listings, the oldest and the sweep follow the
    instants, not the order of buffering."""
    set_span(raw, store, 4)  # spans of 16 ms
    for i, ms in enumerate([1000, 1001, 0, 500, 2000, 499, 1999]):
        assert store.events.buffer(ev(f"e{ms}", f"k/{i}"), at=at(ms))
    t0 = 10**15 + int(at(0).timestamp() * 1000)  # a multiple of 16
    assert [int(s) - t0 for s in live_buckets(raw, store)] == [0, 992, 2000]
    Audit(raw, backend.tenant).run()
    order = [0, 499, 500, 1000, 1001, 1999, 2000]
    assert [e.received_at for e in store.events.live_page()[0]] == [at(ms) for ms in order]
    assert [e.received_at for e in store.events.live_page(newest=True)[0]] == [
        at(ms) for ms in reversed(order)
    ]
    assert store.events.oldest_live() == at(0)
    assert store.events.sweep_unclaimed(at(1000)) == 4
    assert store.events.oldest_live() == at(1001)
    Audit(raw, backend.tenant).run()


def test_pages_of_live_events_go_on_past_events_of_one_instant_and_left_rows(
    store, make, raw, backend
):
    """Live events received in one millisecond share their score in the bucket:
    pages of the listing, oldest and newest first, go on from the cursor by id
    among them, pass over rows that left, and list each live event once."""
    ids = [f"e{i:02}" for i in range(30)]
    for i, id_ in enumerate(ids):
        assert store.events.buffer(ev(id_, f"k/{i}"), at=at(i // 10))  # ten an instant
    other = make(backend.tenant)  # claims through the left lists
    for i in (3, 11, 12, 25):
        assert other.events.claim_for(sub(f"r{i}", "w", f"k/{i}"), at=at(10**8)) is not None
    want = [id_ for i, id_ in enumerate(ids) if i not in (3, 11, 12, 25)]
    for newest in (False, True):
        got = [e.event.id for e in paged(store.events.live_page, 4, newest=newest)]
        assert got == (want[::-1] if newest else want)
    Audit(raw, backend.tenant).run()


def test_a_store_retires_the_waits_it_registered_straight_from_their_order_bucket(
    store, raw, backend
):
    """The store that registered a wait names the order bucket of its registration
    when it retires it (``unsubscribe``, ``unsubscribe_run``, ``close``): its key
    rows leave the bucket at once, and no left list grows."""
    set_span(raw, store, 20, "order")  # one order bucket for what follows
    for i in range(30):
        store.events.subscribe(sub(f"r{i:02}", "w", f"k/{i}"), at=at(i))
    (start,) = raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~")
    bucket = store.keys.order_bucket(start.decode())
    for i in range(20):
        store.events.unsubscribe(f"r{i:02}", "w")
    store.events.unsubscribe_run("r20")
    store.runs.close("r21", [])
    assert raw.zcard(bucket) == 8
    assert left(raw, store, start, "wait_order") == 0
    Audit(raw, backend.tenant).run()
    assert [w.run for w in store.events.waiting(limit=100)] == [f"r{i}" for i in range(22, 30)]


def test_a_wait_registered_again_elsewhere_leaves_the_bucket_of_its_new_instant(
    store, make, raw, backend
):
    """A store retires a wait from the order bucket it registered the wait in, found
    by the member's score. Where another store retired the wait meanwhile (its member
    left on that bucket's left list) and a third registered it again in a later
    bucket, the retirement takes the member of the new instant, not the one left
    behind, which stays on its list."""
    set_span(raw, store, 20, "order")  # one order bucket for the first instants
    for i in range(3):
        store.events.subscribe(sub(f"r{i}", "w", f"k/{i}"), at=at(i))
    (first,) = raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~")
    make(backend.tenant).events.unsubscribe("r0", "w")  # it never learned the bucket
    assert left(raw, store, first, "wait_order") == 1
    make(backend.tenant).events.subscribe(sub("r0", "w", "k/0"), at=at(10**8))
    assert len(raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~")) == 2
    store.events.unsubscribe("r0", "w")  # names the first bucket, where it registered r0
    Audit(raw, backend.tenant).run()
    assert [w.run for w in store.events.waiting(limit=10)] == ["r1", "r2"]
    assert (
        raw.zscore(store.keys.order_bucket(first.decode()), tuple_member(["r0", "w"])) is not None
    )
    assert left(raw, store, first, "wait_order") == 1


def test_a_bucket_left_with_only_members_on_its_left_list_goes(store, make, raw, backend):
    """Where a store retires the last wait of an order bucket straight from it, and the
    bucket's other members left by its left list (retired by a store that never
    learned the bucket), those members go, and the bucket with them."""
    set_span(raw, store, 20, "order")  # one order bucket for what follows
    for i in range(3):
        store.events.subscribe(sub(f"r{i}", "w", f"k/{i}"), at=at(i))
    (start,) = raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~")
    other = make(backend.tenant)
    other.events.unsubscribe("r1", "w")
    other.events.unsubscribe("r2", "w")
    assert left(raw, store, start, "wait_order") == 2
    store.events.unsubscribe("r0", "w")
    assert raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~") == []
    assert not raw.exists(store.keys.order_bucket(start.decode()))
    assert raw.hget(store.keys.key("wait_order"), b"g" + start) is None
    assert raw.hget(store.keys.key("wait_order"), start) is None
    Audit(raw, backend.tenant).run()
    assert store.events.waiting(limit=10) == []


def test_the_registration_order_keeps_its_key_rows_in_time_buckets(store, make, raw, backend):
    """Waits sit in order buckets by created_at, one member for the key rows of one
    instant; a store that never learned their buckets retires waits through the
    left lists, sixteen at a time, and a run's close does too; waiting lists the
    rest's key rows in registration order, passing over what left."""
    set_span(raw, store, 20, "order")  # one order bucket for what follows
    for i in range(30):
        store.events.subscribe(sub(f"r{i:02}", "w", f"k/{i}", f"j/{i}"), at=at(i))
    (start,) = raw.zrangebylex(store.keys.key("wait_order_index"), b"-", b"(~")
    bucket = store.keys.order_bucket(start.decode())
    assert raw.zcard(bucket) == 30
    other = make(backend.tenant)  # one that never learned where the bucket is
    for i in range(15):
        other.events.unsubscribe(f"r{i:02}", "w")
    assert raw.zcard(bucket) == 30
    assert left(raw, store, start, "wait_order") == 15
    Audit(raw, backend.tenant).run()
    other.events.unsubscribe("r15", "w")  # the sixteenth: all dropped
    assert raw.zcard(bucket) == 14
    assert left(raw, store, start, "wait_order") == 0
    make(backend.tenant).runs.close("r16", [])
    assert left(raw, store, start, "wait_order") == 1
    Audit(raw, backend.tenant).run()
    listed = store.events.waiting(limit=100)
    assert [(w.run, w.correlation[0].value) for w in listed][:3] == [
        ("r17", "17"),
        ("r17", "17"),
        ("r18", "18"),
    ]
    assert len(listed) == 26


def test_a_store_that_knows_no_winner_reads_the_election_while_that_finds_waits(
    store, make, raw, backend, monkeypatch
):
    """A store that registered none of the waits (an ingress process) cannot name
    the winner's wait bucket: its delivery is answered NEED and sent again. Once
    that happened, its next delivery reads the election's first waits
    (election_heads) and names their buckets, so the winner is resumed at the
    first call; a read that finds nobody waiting ends the reading."""
    from agentplane_redis import Buffered, ops

    for i in range(3):
        store.events.subscribe(sub(f"r{i}", "w", f"k/{i}"), at=at(i))
    ingress = make(backend.tenant)
    ingress.events.buffer(ev("warm", "k/none"), at=at(5))  # it learns the geometries
    called: list[str] = []
    real = ops.Context.call

    def spy(self: ops.Context, script: str, *args: object, **kwargs: object) -> ops.Call:
        called.append(script)
        return real(self, script, *args, **kwargs)

    monkeypatch.setattr(ops.Context, "call", spy)

    def delivered(event_id: str, key: str, n: int) -> object:
        called.clear()
        return ingress.events.deliver(ev(event_id, key), at=at(10 + n))

    assert delivered("e0", "k/0", 0).subscription.run == "r0"
    assert called == ["deliver", "deliver"]  # NEED for the winner's wait bucket
    assert delivered("e1", "k/1", 1).subscription.run == "r1"
    assert called == ["election_heads", "deliver"]
    assert isinstance(delivered("e9", "k/9", 2), Buffered)  # nobody waits on k/9
    assert called == ["election_heads", "deliver"]
    assert delivered("e2", "k/2", 3).subscription.run == "r2"
    assert called == ["deliver", "deliver"]  # it read nobody last time: NEED again
    # A store that registered the wait names its bucket without reading.
    store.events.subscribe(sub("r3", "w", "k/3"), at=at(20))
    called.clear()
    assert store.events.deliver(ev("e3", "k/3"), at=at(21)).subscription.run == "r3"
    assert called == ["deliver"]
    Audit(raw, backend.tenant).run()


def test_the_election_read_answers_the_key_geometry_where_the_call_had_another(raw, backend):
    """election_heads reads nothing where the client computed its key buckets with
    another geometry than the tenant's: it answers that geometry (BUCKETS)."""
    from agentplane_redis import RedisStore, codec

    store = RedisStore(raw, tenant=backend.tenant)
    driver = store._driver
    h = key_hash("paid", "k", "0")
    bucket = store.keys.key_bucket(Geometry().bucket_of(h))
    store.events.subscribe(sub("r0", "w", "k/0"), at=at(0))
    found = driver.execute(driver.ctx.call("election_heads", ["0 0", f"{h:08x}"], more=[bucket]))
    assert [codec.text(x) for x in found] == ["OK", "r0 w "]
    stale = driver.execute(driver.ctx.call("election_heads", ["3 1", f"{h:08x}"], more=[bucket]))
    assert [codec.text(x) for x in stale] == ["BUCKETS", "0 0"]


def test_a_corrupt_entry_the_election_read_finds_is_reported_by_the_delivery(
    store, make, raw, backend
):
    """The read before an ingress delivery is a hint: an election entry it cannot
    decode names no bucket, and the delivery reports the corruption (CorruptRow)."""
    import pytest

    from agentplane_redis import CorruptRow

    store.events.subscribe(sub("r0", "w", "k/0"), at=at(0))
    store.events.subscribe(sub("r1", "w", "k/1"), at=at(1))
    ingress = make(backend.tenant)
    assert ingress.events.deliver(ev("e0", "k/0"), at=at(5)).subscription.run == "r0"
    h = key_hash("paid", "k", "1")
    bucket = store.keys.key_bucket(key_geometry(raw, store).bucket_of(h))
    raw.zadd(bucket, {f"{h:08x}~ 1001767225600000!".encode(): 0})  # before r1's, no wid
    with pytest.raises(CorruptRow):
        ingress.events.deliver(ev("e1", "k/1"), at=at(6))


def test_a_cursor_no_page_gave_is_refused_by_every_listing(store, raw):
    """A listing's cursor is the one a previous page gave: any other string is
    InvalidInput before anything is sent, and the listing scripts themselves refuse
    one whose instant is not there, rather than failing in Lua."""
    from agentplane_redis import InvalidInput
    from agentplane_redis.ops import script_keys
    from agentplane_redis.scripts import library

    for i in range(3):
        store.events.buffer(ev(f"e{i}", "k/1"), at=at(i))
        store.events.subscribe(sub(f"r{i}", "w", "k/2"), at=at(i))
    # Keys a wait gains later are members of their own, whose cursors say when.
    store.events.subscribe(sub("r0", "w", "k/2", "k/3", "k/4"), at=at(7))
    assert paged(store.events.waiting_page, 1) == store.events.waiting()
    store.events.buffer(ev("d", "k/3"), at=at(0))
    store.events.sweep_unclaimed(at(0))
    for i in range(3):
        store.timers.arm(timer("r", f"t{i}", i, case="a:b c"))
    pages = {
        "live": store.events.live_page,
        "dead": store.events.dead_letters_page,
        "waiting": store.events.waiting_page,
        "pending": store.timers.pending_page,
    }
    for name, page in pages.items():
        first, cursor = page(1)
        assert first, name
        assert cursor is not None, name
        rest, _ = page(10, cursor)
        assert rest, name
        assert rest[0] != first[0], name
        nonsense = ("zzz", "1:2", "-1:x", "\x00", "9" * 40, cursor[:16], "é" + cursor)
        cut = cursor.replace(" 0f", " f") if name == "pending" else cursor + "x"
        for bad in (*nonsense, cut):
            with pytest.raises(InvalidInput):
                page(10, bad)
    raw.function_load(library().source, replace=True)  # where the store sends scripts
    for script in ("live_events", "waiting"):
        keys = list(script_keys(store.keys, script))
        args = [10, "zzz", "oldest"] if script == "live_events" else [10, "zzz"]
        reply = raw.fcall(library().functions[script], len(keys), *keys, *args, "0 0")
        assert [x.decode() if isinstance(x, bytes) else x for x in reply[:1]] == ["REFUSED"]
