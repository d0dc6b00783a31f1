"""Damaged rows (contract 9.2): CorruptRow, never a default, and nothing written."""

from __future__ import annotations

import pytest

from agentplane_redis import CorruptRow, RedisStore
from agentplane_redis.keys import event_id, pack_event_row, tuple_member, unpack_event_row

from helpers import at, data, ev, sub

snapshot = data


def tamper_event(store, raw, source, id_, index, value):
    key = store.keys.key("events")
    fields = unpack_event_row(raw.hget(key, event_id(source, id_)))
    fields[index] = value
    raw.hset(key, event_id(source, id_), pack_event_row(fields))


def tamper_wait(store, raw, run, effect, index, value):
    """Rewrites the wait's row with attribute component index (1 kind, 2 step and
    phase) set to value."""
    wid = tuple_member((run, effect))
    pattern = store.keys.tag.replace("{", "[{]").replace("}", "[}]") + ":wait:[0-9]*"
    for key in raw.scan_iter(match=pattern):
        row = raw.hget(key, wid)
        if row is not None:
            parts = row.split(b" ")
            parts[index - 1] = value
            raw.hset(key, wid, b" ".join(parts))


@pytest.mark.parametrize(
    ("index", "value", "why"),
    [
        (3, b"12a", "received_at not decimal"),
        (3, b"9999999999999999", "received_at out of range"),
        (0, b"A", "unknown state"),
        (8, b"only-actor", "half an operator"),
        (4, b"run", "live row with a claim"),
        (1, b"y", "bad erased mark"),
        (2, b"x", "bad targeted mark"),
    ],
)
def test_a_damaged_event_row_is_refused_without_writing(store, raw, index, value, why):
    """Reads and claims of a damaged row raise CorruptRow and leave the data unchanged."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.subscribe(sub("r", "w", "k/1"), at=at(1))
    tamper_event(store, raw, "src", "e1", index, value)
    before = snapshot(raw)
    for call in (
        lambda: store.events.minter("src", "e1"),
        lambda: store.events.match_waiter(ev("e1"), at=at(2)),
        lambda: store.events.deliver(ev("e1", "k/1"), at=at(2)),
        lambda: store.events.erase_payload("src", "e1"),
    ):
        with pytest.raises(CorruptRow) as caught:
            call()
        assert "e1" in str(caught.value), why
        assert snapshot(raw) == before, why


@pytest.mark.parametrize("index", [7, 8, 12])
def test_minter_refuses_a_row_whose_field_is_not_utf8(store, raw, index):
    """The script checks the row's form and minter's Python what Lua cannot, that every
    field is text: a kind, an actor or a key value that is not UTF-8 is CorruptRow."""
    from agentplane_redis import Operator

    store.events.buffer(ev("e1", "k/1", by=Operator("ops", "why")), at=at(0))
    tamper_event(store, raw, "src", "e1", index, b"\xff\xfe")
    with pytest.raises(CorruptRow, match="e1"):
        store.events.minter("src", "e1")


def test_a_row_that_is_not_a_row_is_refused(store, raw):
    """Text that is not the row format is corrupt, never read as empty."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    raw.hset(store.keys.key("events"), event_id("src", "e1"), b"garbage")
    with pytest.raises(CorruptRow):
        store.events.minter("src", "e1")
    with pytest.raises(CorruptRow):
        store.events.claim_for(sub("r", "w", "k/1"), at=at(1))


@pytest.mark.parametrize(
    "head", [b"l-- 1", b"L--  1", b"L-- +", b"L- - 1", b"L--\t1", b"Le- 1", b"H-- 1", b"D--- 1"]
)
def test_a_row_whose_first_bytes_are_off_is_refused(store, raw, head):
    """A row's first bytes (state, marks, received_at) are exactly the format's: a
    lower-case state, a space too many or too few, a sign, a live row marked
    erased, or a state whose fields the rest does not have is corrupt, never read
    as the same fields."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    key, eid = store.keys.key("events"), event_id("src", "e1")
    row = raw.hget(key, eid)
    assert row.startswith(b"L-- 1")
    raw.hset(key, eid, head + row[len(b"L-- 1") :])
    before = snapshot(raw)
    for call in (
        lambda: store.events.lookup("src", "e1"),
        lambda: store.events.claim_for(sub("r", "w", "k/1"), at=at(1)),
        lambda: store.events.deliver(ev("e1", "k/1"), at=at(2)),
        lambda: store.events.erase_payload("src", "e1"),
    ):
        with pytest.raises(CorruptRow):
            call()
        assert snapshot(raw) == before


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (2, b"0F"),
        (2, b"0"),
        (2, b"0fc"),
        (2, b"4294967296f"),
        (2, b"-1f"),
        (2, b"1.0f"),
        (1, b""),
    ],
)
def test_a_damaged_wait_is_refused(store, raw, index, value):
    """A phase other than f or c, a bad step or an empty kind in the key rows is CorruptRow."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    tamper_wait(store, raw, "r", "w", index, value)
    before = snapshot(raw)
    with pytest.raises(CorruptRow):
        store.events.waiting()
    with pytest.raises(CorruptRow):
        store.events.match_waiter(ev("e1"), at=at(2))
    with pytest.raises(CorruptRow):
        store.events.subscribe(sub("r", "w", "k/2"), at=at(2))
    assert snapshot(raw) == before


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_wait_row_short_of_its_attributes_is_refused_on_the_usual_paths(store, raw, cut):
    """deliver, claim_for and unsubscribe read the usual wait's row at its fields: a row
    that lost an attribute component is CorruptRow there too, and nothing is written."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    wid = tuple_member(("r", "w"))
    pattern = store.keys.tag.replace("{", "[{]").replace("}", "[}]") + ":wait:[0-9]*"
    for key in raw.scan_iter(match=pattern):
        row = raw.hget(key, wid)
        if row is not None:
            parts = row.split(b" ")
            raw.hset(key, wid, b" ".join(parts[:cut] + parts[cut + 1 :]))
    before = snapshot(raw)
    with pytest.raises(CorruptRow):
        store.events.deliver(ev("e1", "k/1"), at=at(1))
    with pytest.raises(CorruptRow):
        store.events.unsubscribe("r", "w")
    assert snapshot(raw) == before


def test_a_corrupt_payload_is_reported_after_the_claim_is_recorded(store, raw):
    """Only Python parses payloads: the claim stands and behaves like a crashed caller's."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    key, eid = store.keys.key("events"), event_id("src", "e1")
    row, payload = raw.hget(key, eid), b'{"id":"e1"}'
    last = b"\n" + payload
    assert row.endswith(last)  # the payload, last
    raw.hset(key, eid, row[: -len(last)] + b"\n{not json")
    with pytest.raises(CorruptRow):
        store.events.wait(sub("r", "w", "k/1"), at=at(1))
    assert store.events.stats().claimed == 1
    with pytest.raises(CorruptRow):
        store.events.claim_for(sub("r", "w", "k/1"), at=at(2))
    store.events.unsubscribe("r", "w")
    assert store.events.stats().consumed == 1


def test_a_dangling_index_entry_is_reported(store, raw):
    """An index naming a row that is gone is corruption, not a silent skip."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    raw.hdel(store.keys.key("events"), event_id("src", "e1"))
    before = snapshot(raw)
    with pytest.raises(CorruptRow):
        store.events.claim_for(sub("r", "w", "k/1"), at=at(1))
    with pytest.raises(CorruptRow):
        store.events.sweep_unclaimed(at(5))
    assert snapshot(raw) == before


def test_corruption_is_reported_through_a_decoding_client():
    """With decode_responses=True, a damaged row with NULs in its id is still CorruptRow."""
    import fakeredis

    server = fakeredis.FakeServer()
    store = RedisStore(fakeredis.FakeRedis(server=server, decode_responses=True), tenant="t")
    store.events.buffer(ev("i\x00", "k/1", source="s\x00"), at=at(0))
    fakeredis.FakeRedis(server=server).hset(
        store.keys.key("events"), event_id("s\x00", "i\x00"), b"junk"
    )
    with pytest.raises(CorruptRow, match=r"event s!@ i!@ "):
        store.events.minter("s\x00", "i\x00")


@pytest.mark.parametrize("attrs", [b"soon", b"-1f", b"0x", b"", b"1c"])
def test_a_damaged_timer_row_is_refused(store, raw, attrs):
    """A bucket row whose attributes are not step, phase, case, or are not those of
    the timer's walk entry: CorruptRow from every operation that reads it, and
    nothing written."""
    from helpers import timer

    store.timers.arm(timer("r", "t", 0))
    store.timers.arm(timer("r", "u", 0))
    store.timers.claim_due(now=at(0), limit=1)  # one held, one not
    for effect in ("t", "u"):
        key, tid = store.keys.timer_bucket("r"), tuple_member(("r", effect))
        kept = raw.hget(key, tid)
        raw.hset(key, tid, attrs)
        before = snapshot(raw)
        for call in (
            lambda: store.timers.armed("r"),
            lambda e=effect: store.timers.lookup("r", e),
            lambda e=effect: store.timers.disarm("r", e),
            lambda: store.timers.disarm_run("r"),
            lambda e=effect: store.timers.disarm_many([("r", e)]),
            lambda: store.runs.close("r"),
            lambda: store.runs.seal("r"),
        ):
            with pytest.raises(CorruptRow):
                call()
            assert snapshot(raw) == before
        raw.hset(key, tid, kept)


@pytest.mark.parametrize("tail", [b"x", b"-1f", b"f", b"99999999999f"])
def test_a_damaged_walk_entry_is_refused(store, raw, tail):
    """A walk member whose attributes are not step, phase, case: CorruptRow from the
    operations that read the walk, and nothing written."""
    from helpers import timer

    store.timers.arm(timer("r", "t", 0))
    walk = store.keys.key("timer_walk")
    member = raw.zrange(walk, 0, 0)[0]
    raw.zrem(walk, member)
    raw.zadd(walk, {tuple_member(("r", "t")) + tail: 0})
    before = snapshot(raw)
    for call in (store.timers.pending, lambda: store.timers.claim_due(now=at(10))):
        with pytest.raises(CorruptRow):
            call()
        assert snapshot(raw) == before


@pytest.mark.parametrize("claimed", [False, True])
def test_a_timer_row_in_no_walk_is_refused_by_disarm(store, raw, claimed):
    """A timer whose row is in its bucket but whose member is in neither the walk nor
    the held sets: disarm reports CorruptRow and writes nothing."""
    from helpers import timer

    store.timers.arm(timer("r", "t", 0))
    if claimed:
        store.timers.claim_due(now=at(10))
    member = tuple_member(("r", "t")) + b"0f"
    for role in ("timer_walk", "timer_held", "timer_held_fire"):
        raw.zrem(store.keys.key(role), member)
    before = snapshot(raw)
    with pytest.raises(CorruptRow, match="no walk"):
        store.timers.disarm("r", "t")
    assert snapshot(raw) == before


def test_a_corrupt_timer_after_a_sealed_one_leaves_the_walk_unwritten(store, raw):
    """claim_due retires a sealed run's timers and claims others in one step; a corrupt
    member met later on the same walk is refused before either is written."""
    from helpers import timer

    store.timers.arm(timer("sealed", "t", 0))
    store.timers.arm(timer("r", "ok", 1))
    store.timers.arm(timer("r", "bad", 2))
    store.runs.seal("sealed")
    walk, bad = store.keys.key("timer_walk"), tuple_member(("r", "bad"))
    score = raw.zscore(walk, bad + b"0f")
    raw.zrem(walk, bad + b"0f")
    raw.zadd(walk, {bad + b"0F": score})
    before = snapshot(raw)
    with pytest.raises(CorruptRow):
        store.timers.claim_due(now=at(10))
    assert snapshot(raw) == before
    # A page with room for one reads only the timers it reaches.
    assert [t.effect for t in store.timers.claim_due(now=at(10), limit=1)] == ["ok"]
    assert store.timers.lookup("sealed", "t") is None


def test_a_timer_id_that_is_not_utf8_is_reported_by_the_claim(store, raw):
    """Scripts check an id's shape, not its text: a run name that is not UTF-8 reaches
    the codec, which reports the claimed timer as CorruptRow, never a decoding error."""
    from helpers import timer

    store.timers.arm(timer("r", "t", 0))
    walk = store.keys.key("timer_walk")
    good, bad = tuple_member(("r", "t")), b"r\xfe t "
    raw.zrem(walk, good + b"0f")
    raw.zadd(walk, {bad + b"0f": 0})
    with pytest.raises(CorruptRow, match="timer"):
        store.timers.claim_due(now=at(10))


@pytest.mark.parametrize("tid", [b"junk", b"r ", b"r t x"])
def test_a_walked_timer_member_that_is_not_an_id_is_refused(store, raw, tid):
    """A member of the claim walk whose id is not (run, effect) is refused as
    CorruptRow before anything is written."""
    from helpers import timer

    store.timers.arm(timer("r", "t", 0))
    raw.zadd(store.keys.key("timer_walk"), {tid: 0})
    before = snapshot(raw)
    with pytest.raises(CorruptRow, match="bad timer member"):
        store.timers.claim_due(now=at(10))
    assert snapshot(raw) == before
