"""The event store's contract (sections 2-3, 6), over every backend and flavour."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from agentplane_redis import (
    Buffered,
    BufferedEvent,
    Duplicate,
    EventStats,
    Matched,
    Minter,
    NotWaiting,
    Operator,
    Phase,
    Resumed,
    Retired,
)
from agentplane_redis.ops import SWEEP_BATCH

from helpers import at, data, ev, ids, sub

# ------------------------------------------------------------ 3.1 buffer


def test_buffer_stores_a_new_event_once(store):
    """buffer answers True for a new pair and False for every repeat."""
    assert store.events.buffer(ev("e1", "order/A-1"), at=at(0)) is True
    assert store.events.buffer(ev("e1", "order/A-1"), at=at(5)) is False
    assert store.events.stats() == EventStats(1, 0, 0, 0, 0, 0)


def test_buffer_of_a_duplicate_leaves_the_stored_row_as_it_was(store):
    """A duplicate with another body changes no payload, kind, key or received_at."""
    store.events.buffer(ev("e1", "order/A-1", payload={"v": 1}), at=at(0))
    assert not store.events.buffer(
        ev("e1", "order/B-2", kind="other", payload={"v": 2}, by=Operator("a", "b")), at=at(9)
    )
    got = store.events.claim_for(sub("r", "w", "order/A-1"), at=at(10))
    assert got == BufferedEvent(ev("e1", "order/A-1", payload={"v": 1}), at(0))
    assert store.events.minter("src", "e1") == Minter(None)


def test_identity_is_the_pair_injectively(store):
    """(a␟b, c) and (a, b␟c), and pairs differing only around NUL, are distinct events."""
    pairs = [("a\x1fb", "c"), ("a", "b\x1fc"), ("a\x00", "b"), ("a", "\x00b"), ("a", "b")]
    for source, id_ in pairs:
        assert store.events.buffer(ev(id_, "k/1", source=source), at=at(0))
    assert store.events.stats().live == len(pairs)
    for source, id_ in pairs:
        assert not store.events.buffer(ev(id_, "k/1", source=source), at=at(0))


def test_buffer_refuses_the_pair_in_every_state(store):
    """Live, held, consumed, dead and erased rows all make buffer answer False."""
    store.events.buffer(ev("live", "k/1"), at=at(0))
    store.events.buffer(ev("held", "k/2"), at=at(0))
    store.events.wait(sub("r", "w2", "k/2"), at=at(1))
    store.events.buffer(ev("consumed", "k/3"), at=at(0))
    store.events.wait(sub("r", "w3", "k/3"), at=at(1))
    store.events.unsubscribe("r", "w3")
    store.events.buffer(ev("dead", "k/4"), at=at(0))
    store.events.buffer(ev("erased", "k/5"), at=at(0))
    store.events.erase_payload("src", "erased")
    store.events.sweep_unclaimed(at(0), "late")
    for name in ("live", "held", "consumed", "dead", "erased"):
        assert store.events.buffer(ev(name, "k/9"), at=at(2)) is False, name


def test_an_event_without_keys_is_kept_but_never_claimed(store):
    """A keyless event is live, never claimable, and reached by the sweep."""
    store.events.buffer(ev("e1"), at=at(0))
    store.events.subscribe(sub("r", "w", "order/A-1"), at=at(1))
    assert store.events.match_waiter(ev("e1"), at=at(2)) is None
    assert store.events.stats().live == 1
    assert store.events.sweep_unclaimed(at(0)) == 1


def test_buffer_does_not_look_for_a_waiter(store):
    """buffer leaves a matching wait waiting and the event live."""
    store.events.subscribe(sub("r", "w", "order/A-1"), at=at(0))
    store.events.buffer(ev("e1", "order/A-1"), at=at(1))
    assert store.events.stats() == EventStats(
        live=1, claimed=0, consumed=0, dead=0, waits=1, parked=0
    )


# ------------------------------------------------------------ 3.2 subscribe


def test_subscribe_keeps_the_first_attributes_and_adds_missing_keys(store):
    """A later subscribe adds keys the wait lacks but never changes its attributes."""
    store.events.subscribe(
        sub("r", "w", "k/1", step=3, phase=Phase.COMPENSATING, case="c"), at=at(0)
    )
    store.events.subscribe(sub("r", "w", "k/2", kind="other", step=9, from_source="x"), at=at(5))
    waiting = store.events.waiting()
    assert [
        (s.correlation[0].value, s.kind, s.step, s.phase, s.case, s.from_source) for s in waiting
    ] == [
        ("1", "paid", 3, Phase.COMPENSATING, "c", None),
        ("2", "paid", 3, Phase.COMPENSATING, "c", None),
    ]
    assert store.events.stats().waits == 1


def test_queue_position_is_the_first_registration_per_key(store):
    """Re-subscribing does not move a wait back in the election queue."""
    store.events.subscribe(sub("a", "w", "k/1"), at=at(0))
    store.events.subscribe(sub("b", "w", "k/1"), at=at(1))
    store.events.subscribe(sub("a", "w", "k/1"), at=at(2))
    assert ids(store.events.waiting()) == [("a", "w"), ("b", "w")]
    assert store.events.deliver(ev("e", "k/1"), at=at(3)).subscription.run == "a"


def test_subscribe_does_not_search_the_buffer_nor_clear_a_mark(store):
    """subscribe claims nothing and leaves a parked wait parked."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.subscribe(sub("r", "w", "k/1"), at=at(1))
    assert store.events.stats().live == 1
    store.events.park_wait(sub("r", "w", "k/1"), at=at(2))
    store.events.subscribe(sub("r", "w", "k/1", "k/2"), at=at(3))
    assert ids(store.events.parked_waits()) == [("r", "w")]


# ------------------------------------------------------------ 3.3 claim_for


def test_claim_for_takes_the_oldest_event_under_the_first_key(store):
    """Events under a key by (received_at, source, id); keys in subscription order."""
    store.events.buffer(ev("old", "k/2"), at=at(0))
    store.events.buffer(ev("b", "k/1", source="s2"), at=at(5))
    store.events.buffer(ev("z", "k/1", source="s1"), at=at(5))
    store.events.buffer(ev("a", "k/1", source="s1"), at=at(5))
    got = store.events.claim_for(sub("r", "w1", "k/1", "k/2"), at=at(10))
    assert (got.event.source, got.event.id) == ("s1", "a")
    store.events.unsubscribe("r", "w1")
    order = []
    for n in range(3):
        got = store.events.claim_for(sub("r", f"x{n}", "k/1", "k/2"), at=at(10))
        order.append(got.event.id)
        store.events.unsubscribe("r", f"x{n}")
    assert order == ["z", "b", "old"]


def test_claim_for_matches_kind_and_source(store):
    """Only the stored kind, and the stored source when from_source is set, qualify."""
    store.events.buffer(ev("other-kind", "k/1", kind="refund"), at=at(0))
    store.events.buffer(ev("from-a", "k/1", source="a"), at=at(1))
    store.events.buffer(ev("from-b", "k/1", source="b"), at=at(2))
    got = store.events.claim_for(sub("r", "w", "k/1", from_source="b"), at=at(3))
    assert got.event.id == "from-b"
    got = store.events.claim_for(sub("r", "v", "k/1"), at=at(3))
    assert got.event.id == "from-a"
    assert store.events.claim_for(sub("r", "u", "k/1", kind="nothing"), at=at(3)) is None


def test_the_claim_search_takes_the_oldest_across_senders(store):
    """Without from_source the oldest live event under the key wins whatever its sender,
    by (received_at, source, id); with it, the oldest of that sender. Senders whose
    rows are held or of another key or kind are passed over."""
    store.events.buffer(ev("late", "k/1", source="a"), at=at(9))
    store.events.buffer(ev("b2", "k/1", source="b b"), at=at(5))
    store.events.buffer(ev("b1", "k/1", source="b b"), at=at(5))
    store.events.buffer(ev("tie", "k/1", source="a"), at=at(5))
    store.events.buffer(ev("c", "k/1", source="c!"), at=at(7))
    store.events.buffer(ev("other", "k/2", source="0"), at=at(1))
    store.events.buffer(ev("refund", "k/1", source="0", kind="refund"), at=at(1))
    order = []
    for n in range(5):
        got = store.events.claim_for(sub("r", f"x{n}", "k/1"), at=at(10))
        order.append((got.event.source, got.event.id))
    assert order == [("a", "tie"), ("b b", "b1"), ("b b", "b2"), ("c!", "c"), ("a", "late")]
    store.events.buffer(ev("d2", "k/1", source="d"), at=at(3))
    store.events.buffer(ev("e", "k/1", source="e"), at=at(2))
    store.events.buffer(ev("d1", "k/1", source="d"), at=at(4))
    got = store.events.claim_for(sub("r", "y", "k/1", from_source="d"), at=at(10))
    assert (got.event.source, got.event.id) == ("d", "d2")
    got = store.events.claim_for(sub("r", "z", "k/1"), at=at(10))
    assert got.event.id == "e"


@pytest.mark.parametrize("first_sender_rows", [1, 7, 8, 12])
def test_the_claim_search_finds_the_oldest_sender_behind_many_rows_of_another(
    store, first_sender_rows
):
    """A sender whose rows sort after many of another sender's still has its oldest
    row found, by claim_for and by wait alike."""
    for i in range(first_sender_rows):
        store.events.buffer(ev(f"a{i:02d}", "k/1", source="a"), at=at(10 + i))
    store.events.buffer(ev("b", "k/1", source="b"), at=at(1))
    store.events.buffer(ev("c", "k/1", source="c"), at=at(2))
    assert store.events.claim_for(sub("r", "x", "k/1"), at=at(50)).event.id == "b"
    assert store.events.wait(sub("r", "y", "k/1"), at=at(50)).event.id == "c"
    for i in range(first_sender_rows):
        got = store.events.wait(sub("r", f"z{i}", "k/1"), at=at(50))
        assert got.event.id == f"a{i:02d}"
    assert store.events.wait(sub("r", "none", "k/1"), at=at(50)) is None


def test_claim_for_recovers_its_own_claim_with_the_payload(store):
    """A retry returns the same event, payload included, until unsubscribe."""
    store.events.buffer(ev("e1", "k/1", payload={"x": [1, 2]}), at=at(0))
    first = store.events.claim_for(sub("r", "w", "k/1"), at=at(1))
    store.events.buffer(ev("e2", "k/1"), at=at(2))
    again = store.events.claim_for(sub("r", "w", "k/1"), at=at(3))
    assert first == again
    assert again.event.payload == {"x": [1, 2]}
    assert store.events.stats() == EventStats(
        live=1, claimed=1, consumed=0, dead=0, waits=0, parked=1
    )


def test_claim_for_parks_even_an_unregistered_wait_with_a_bare_mark(store):
    """A claim by an unsubscribed wait leaves a bare mark: parked, but not a registration."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.claim_for(sub("r", "w", "k/1"), at=at(1))
    assert store.events.waiting() == []
    assert store.events.parked_waits() == []
    assert store.events.stats().parked == 1


def test_a_miss_writes_nothing(store, raw):
    """claim_for without an eligible event changes no key."""
    store.events.buffer(ev("e1", "k/1", kind="other"), at=at(0))
    before = data(raw)
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(1)) is None
    assert data(raw) == before


def test_a_consumed_or_foreign_held_event_is_never_claimed(store):
    """After unsubscribe the run's next wait waits for a new event; others' claims are theirs."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.wait(sub("r", "w1", "k/1"), at=at(1))
    assert store.events.claim_for(sub("other", "w", "k/1"), at=at(2)) is None
    store.events.unsubscribe("r", "w1")
    assert store.events.wait(sub("r", "w2", "k/1"), at=at(3)) is None


def test_a_wait_holding_a_claim_takes_no_second_event(store):
    """A parked wait with a claim recovers only that claim."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.buffer(ev("e2", "k/2"), at=at(0))
    store.events.claim_for(sub("r", "w", "k/1"), at=at(1))
    assert store.events.claim_for(sub("r", "w", "k/2"), at=at(2)) is None
    assert store.events.stats().live == 1


def test_claim_for_does_not_check_sealing(store):
    """A sealed run's claim_for still claims (its journal refuses later)."""
    store.runs.seal("r")
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(1)).event.id == "e1"


# ------------------------------------------------------------ 3.4 match_waiter


def test_match_waiter_elects_the_oldest_wait_with_tie_breaks(store):
    """Oldest created_at wins; ties go to the smaller run, then the smaller effect."""
    store.events.subscribe(sub("b", "w", "k/1"), at=at(5))
    store.events.subscribe(sub("a", "y", "k/1"), at=at(5))
    store.events.subscribe(sub("a", "x", "k/1"), at=at(5))
    store.events.subscribe(sub("late", "w", "k/1"), at=at(9))
    winners = []
    for n in range(4):
        store.events.buffer(ev(f"e{n}", "k/1"), at=at(10))
        winners.append(ids([store.events.match_waiter(ev(f"e{n}", "k/1"), at=at(11))])[0])
    assert winners == [("a", "x"), ("a", "y"), ("b", "w"), ("late", "w")]


def test_match_waiter_uses_the_stored_row_not_the_argument(store):
    """The argument identifies by (source, id); stored kind and keys decide."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    got = store.events.match_waiter(ev("e1", "k/other", kind="nope"), at=at(2))
    assert ids([got]) == [("r", "w")]


def test_match_waiter_walks_keys_in_first_given_order(store):
    """The event's first key is searched first, whatever the waits' ages."""
    store.events.subscribe(sub("old", "w", "k/2"), at=at(0))
    store.events.subscribe(sub("new", "w", "k/1"), at=at(5))
    store.events.buffer(ev("e1", "k/1", "k/2"), at=at(6))
    assert store.events.match_waiter(ev("e1"), at=at(7)).run == "new"


def test_match_waiter_passes_over_sealed_parked_and_other_sender_waits(store):
    """Sealed runs', parked and from_source-mismatched waits are skipped and left untouched."""
    store.events.subscribe(sub("sealed", "w", "k/1"), at=at(0))
    store.runs.seal("sealed")
    store.events.park_wait(sub("parked", "w", "k/1"), at=at(1))
    store.events.subscribe(sub("picky", "w", "k/1", from_source="elsewhere"), at=at(2))
    store.events.subscribe(sub("fits", "w", "k/1", from_source="src"), at=at(3))
    store.events.buffer(ev("e1", "k/1"), at=at(4))
    assert store.events.match_waiter(ev("e1"), at=at(5)).run == "fits"
    assert len(store.events.waiting()) == 4
    assert ids(store.events.parked_waits()) == [("fits", "w"), ("parked", "w")]


def test_sender_restricted_and_open_waits_merge_by_age(store):
    """A from_source wait older than an open one wins, and the other way round."""
    store.events.subscribe(sub("open", "w", "k/1"), at=at(2))
    store.events.subscribe(sub("strict", "w", "k/1", from_source="src"), at=at(1))
    store.events.buffer(ev("e1", "k/1"), at=at(3))
    store.events.buffer(ev("e2", "k/1"), at=at(3))
    assert store.events.match_waiter(ev("e1"), at=at(4)).run == "strict"
    assert store.events.match_waiter(ev("e2"), at=at(4)).run == "open"


@pytest.mark.parametrize("open_waits", [1, 7, 8, 12])
def test_deliver_merges_a_senders_waits_behind_many_open_ones_by_age(store, open_waits):
    """However many open waits a key has, an older wait of the event's sender wins a
    delivery, and a younger one waits its turn; another sender's wait never wins."""
    store.events.subscribe(sub("other", "w", "k/1", from_source="elsewhere"), at=at(0))
    store.events.subscribe(sub("strict", "w", "k/1", from_source="src"), at=at(1))
    for i in range(open_waits):
        store.events.subscribe(sub(f"open-{i}", "w", "k/1"), at=at(2 + i))
    store.events.subscribe(sub("late", "w", "k/1", from_source="src"), at=at(100))
    got = store.events.deliver(ev("e1", "k/1"), at=at(200))
    assert got.subscription.run == "strict"
    for i in range(open_waits):
        got = store.events.deliver(ev(f"e-open-{i}", "k/1"), at=at(200))
        assert got.subscription.run == f"open-{i}"
    assert store.events.deliver(ev("e-last", "k/1"), at=at(200)).subscription.run == "late"
    assert isinstance(store.events.deliver(ev("e-none", "k/1"), at=at(200)), Buffered)


def test_match_waiter_with_nobody_writes_nothing_and_keeps_the_event_live(store, raw):
    """No qualifying wait: None, nothing written, still live."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    before = data(raw)
    assert store.events.match_waiter(ev("e1"), at=at(1)) is None
    assert data(raw) == before


def test_the_winner_is_parked_but_stays_registered(store):
    """After a match the wait is parked and listed; matching again returns None."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    won = store.events.match_waiter(ev("e1"), at=at(2))
    assert won == sub("r", "w", "k/1")
    assert store.events.match_waiter(ev("e1"), at=at(3)) is None
    assert ids(store.events.waiting()) == [("r", "w")]
    assert ids(store.events.parked_waits()) == [("r", "w")]
    store.events.buffer(ev("e2", "k/1"), at=at(4))
    assert store.events.match_waiter(ev("e2"), at=at(5)) is None


def test_match_waiter_on_unknown_or_not_live_rows_is_none(store):
    """No row, or a held, consumed or dead row, gives None."""
    assert store.events.match_waiter(ev("nope", "k/1"), at=at(0)) is None
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.sweep_unclaimed(at(0))
    store.events.subscribe(sub("r", "w", "k/1"), at=at(1))
    assert store.events.match_waiter(ev("e1"), at=at(2)) is None


def test_the_returned_subscription_carries_all_keys_sorted(store):
    """A Subscription reply holds the attributes and every key, sorted by bytes."""
    store.events.subscribe(sub("r", "w", "z/1", "a/2", "a/1", step=7, case="c"), at=at(0))
    store.events.buffer(ev("e1", "a/2"), at=at(1))
    got = store.events.match_waiter(ev("e1"), at=at(2))
    assert got == sub("r", "w", "a/1", "a/2", "z/1", step=7, case="c")


# ------------------------------------------------------------ 3.5 deliver_to


def test_deliver_to_matches_the_smallest_effect_whatever_its_age(store):
    """The run's unparked qualifying wait with the smallest effect wins."""
    store.events.subscribe(sub("r", "b", "k/1"), at=at(0))
    store.events.subscribe(sub("r", "a", "k/1"), at=at(5))
    store.events.subscribe(sub("r", "0", "k/1", kind="other"), at=at(0))
    out = store.events.deliver_to("r", ev("e1", "k/1"), at=at(6))
    assert out == Matched(sub("r", "a", "k/1"))
    assert store.events.stats() == EventStats(
        live=0, claimed=1, consumed=0, dead=0, waits=3, parked=1
    )
    assert store.events.claim_for(sub("r", "a", "k/1"), at=at(7)).received_at == at(6)


def test_deliver_to_without_a_free_wait_stores_nothing(store, raw):
    """NotWaiting writes nothing; a later buffer of the pair answers True."""
    store.events.park_wait(sub("r", "w", "k/1"), at=at(0))
    before = data(raw)
    assert store.events.deliver_to("r", ev("e1", "k/1"), at=at(1)) == NotWaiting()
    assert store.events.deliver_to("other", ev("e1", "k/1"), at=at(1)) == NotWaiting()
    assert data(raw) == before
    assert store.events.buffer(ev("e1", "k/1"), at=at(2))


def test_deliver_to_retry_answers_matched_and_others_duplicate(store):
    """A retry while held is Matched again; consumed retries and strangers are Duplicate."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    first = store.events.deliver_to("r", ev("e1", "k/1"), at=at(1))
    assert store.events.deliver_to("r", ev("e1", "k/1"), at=at(2)) == first
    assert store.events.deliver_to("x", ev("e1", "k/1"), at=at(2)) == Duplicate()
    store.events.unsubscribe("r", "w")
    store.events.subscribe(sub("r", "w2", "k/1"), at=at(3))
    assert store.events.deliver_to("r", ev("e1", "k/1"), at=at(4)) == Duplicate()
    store.events.buffer(ev("plain", "k/1"), at=at(5))
    assert store.events.deliver_to("r", ev("plain", "k/1"), at=at(6)) == Duplicate()


def test_a_second_message_while_the_only_wait_holds_a_claim_is_not_waiting(store):
    """A run's only qualifying wait holding a claim answers NotWaiting to a new message."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.events.deliver_to("r", ev("e1", "k/1"), at=at(1))
    assert store.events.deliver_to("r", ev("e2", "k/1"), at=at(2)) == NotWaiting()


def test_deliver_to_respects_from_source_and_keys(store):
    """A wait qualifies only with a shared key and a matching from_source."""
    store.events.subscribe(sub("r", "a", "k/1", from_source="other"), at=at(0))
    store.events.subscribe(sub("r", "b", "k/2"), at=at(0))
    assert store.events.deliver_to("r", ev("e1", "k/1"), at=at(1)) == NotWaiting()
    assert store.events.deliver_to("r", ev("e1", "k/1", "k/2"), at=at(1)) == Matched(
        sub("r", "b", "k/2")
    )


def test_a_targeted_row_is_never_live_and_dies_with_its_run(store):
    """Unanswered targeted claims are dead-lettered with the contract's reason, not released."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.events.deliver_to("r", ev("e1", "k/1"), at=at(1))
    assert store.events.sweep_unclaimed(at(100)) == 0
    retired = store.events.unsubscribe_run("r", ["w"])
    assert retired == Retired(1, ())
    [dead] = store.events.dead_letters()
    assert dead.reason == "the run it was addressed to concluded without consuming it"
    assert dead.received_at == at(1)
    assert dead.event.payload == {"id": "e1"}


# ------------------------------------------------------------ 3.6 deliver, 3.7 wait


def test_deliver_outcomes(store):
    """New: Resumed or Buffered; live duplicate: re-offered; not live: Duplicate."""
    assert store.events.deliver(ev("e1", "k/1"), at=at(0)) == Buffered()
    assert store.events.deliver(ev("e1", "k/1"), at=at(1)) == Duplicate()
    store.events.subscribe(sub("r", "w", "k/1"), at=at(2))
    assert store.events.deliver(ev("e1", "k/1"), at=at(3)) == Resumed(sub("r", "w", "k/1"))
    assert store.events.deliver(ev("e1", "k/1"), at=at(4)) == Duplicate()
    store.events.subscribe(sub("r2", "w", "k/1"), at=at(5))
    assert store.events.deliver(ev("e2", "k/1"), at=at(6)) == Resumed(sub("r2", "w", "k/1"))


def test_an_event_and_a_wait_arriving_in_either_order_meet(store):
    """The ordering rule: whichever side searches second finds the other."""
    assert store.events.wait(sub("r1", "w", "k/1"), at=at(0)) is None
    assert store.events.deliver(ev("e1", "k/1"), at=at(1)) == Resumed(sub("r1", "w", "k/1"))
    assert store.events.deliver(ev("e2", "k/2"), at=at(2)) == Buffered()
    assert store.events.wait(sub("r2", "w", "k/2"), at=at(3)).event.id == "e2"


def test_wait_registers_on_a_miss_and_recovers_on_retry(store):
    """wait leaves the wait registered on None, and a retry returns the own claim."""
    assert store.events.wait(sub("r", "w", "k/1"), at=at(0)) is None
    assert ids(store.events.waiting()) == [("r", "w")]
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    store.events.buffer(ev("e2", "k/1"), at=at(2))
    first = store.events.wait(sub("r", "w", "k/1"), at=at(3))
    assert first.event.id == "e1"
    assert store.events.wait(sub("r", "w", "k/1"), at=at(4)) == first


# ------------------------------------------------------------ 3.8 unsubscribe


def test_unsubscribe_sheds_only_its_own_claim(store):
    """The wait's claim becomes consumed (payload gone, dedup kept); siblings keep theirs."""
    store.events.buffer(ev("e1", "k/1", by=Operator("ann", "ops")), at=at(0))
    store.events.buffer(ev("e2", "k/2"), at=at(0))
    store.events.wait(sub("r", "a", "k/1"), at=at(1))
    store.events.wait(sub("r", "b", "k/2"), at=at(1))
    store.events.unsubscribe("r", "a")
    assert store.events.stats() == EventStats(
        live=0, claimed=1, consumed=1, dead=0, waits=1, parked=1
    )
    assert store.events.claim_for(sub("r", "b", "k/2"), at=at(2)).event.payload == {"id": "e2"}
    assert not store.events.buffer(ev("e1", "k/1"), at=at(3))
    assert store.events.minter("src", "e1") == Minter(Operator("ann", "ops"))


def test_unsubscribe_is_idempotent_and_unknown_waits_are_a_no_op(store):
    """Repeats and unknown waits change nothing."""
    store.events.subscribe(sub("r", "w", "k/1", "k/2"), at=at(0))
    store.events.unsubscribe("r", "w")
    store.events.unsubscribe("r", "w")
    store.events.unsubscribe("nobody", "w")
    assert store.events.stats() == EventStats(0, 0, 0, 0, 0, 0)
    assert store.events.waiting() == []


# ------------------------------------------------------------ 3.9 park_wait


def test_a_parked_wait_is_never_chosen_but_recovers_its_claim(store):
    """park_wait registers and parks; deliver, match_waiter and deliver_to skip it."""
    store.events.buffer(ev("e0", "k/1"), at=at(0))
    store.events.claim_for(sub("r", "w", "k/1"), at=at(1))
    store.events.park_wait(sub("r", "w", "k/1"), at=at(2))
    assert ids(store.events.parked_waits()) == [("r", "w")]
    assert store.events.deliver(ev("e1", "k/1"), at=at(3)) == Buffered()
    assert store.events.deliver_to("r", ev("e2", "k/1"), at=at(3)) == NotWaiting()
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(4)).event.id == "e0"


def test_a_parked_wait_without_a_claim_cannot_claim_live_events(store):
    """A parked wait with no claim gets None from claim_for."""
    store.events.park_wait(sub("r", "w", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(2)) is None


# ------------------------------------------------------------ 3.10 unsubscribe_run


def test_unsubscribe_run_releases_unanswered_and_sheds_answered(store):
    """Unanswered claims go live again at their original instant, in order; others shed."""
    for n, key in enumerate(("k/1", "k/2", "k/3")):
        store.events.buffer(ev(f"e{n}", key), at=at(10 - n))
    store.events.subscribe(sub("r", "two-keys", "k/1", "x/9"), at=at(20))
    store.events.wait(sub("r", "two-keys", "k/1"), at=at(21))
    store.events.wait(sub("r", "b", "k/2"), at=at(21))
    store.events.wait(sub("r", "c", "k/3"), at=at(21))
    store.events.claim_for(sub("r", "bare", "zz/0"), at=at(21))
    retired = store.events.unsubscribe_run("r", ["two-keys", "b", "b", "unknown"])
    assert retired.waits == 3
    assert [e.id for e in retired.released] == ["e1", "e0"]
    assert retired.released[0].payload == {"id": "e1"}
    assert store.events.stats() == EventStats(
        live=2, claimed=0, consumed=1, dead=0, waits=0, parked=0
    )
    got = store.events.wait(sub("s", "w", "k/1"), at=at(30))
    assert got.received_at == at(10)
    assert store.events.unsubscribe_run("r", ["two-keys"]) == Retired(0, ())


def test_released_events_are_offered_with_match_waiter(store):
    """The caller re-offers released events; buffer would say duplicate."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.wait(sub("r", "w", "k/1"), at=at(1))
    released = store.events.unsubscribe_run("r", ["w"]).released
    store.events.subscribe(sub("next", "w", "k/1"), at=at(2))
    assert not store.events.buffer(released[0], at=at(3))
    assert store.events.match_waiter(released[0], at=at(3)).run == "next"


# ------------------------------------------------------------ 3.11 parked_waits


def test_parked_waits_lists_in_run_effect_order_within_the_limit(store):
    """Registered parked waits, (run, effect) ascending; bare marks skipped."""
    for run, effect in (("b", "1"), ("a", "2"), ("a", "1"), ("c", "0")):
        store.events.park_wait(sub(run, effect, "k/1"), at=at(0))
    store.events.buffer(ev("e", "k/5"), at=at(0))
    store.events.claim_for(sub("a0", "bare", "k/5"), at=at(1))
    assert ids(store.events.parked_waits()) == [("a", "1"), ("a", "2"), ("b", "1"), ("c", "0")]
    assert ids(store.events.parked_waits(2)) == [("a", "1"), ("a", "2")]
    assert store.events.parked_waits(0) == []
    assert store.events.stats().parked == 5


def test_parked_waits_retires_sealed_runs_past_a_full_page(store):
    """A sealed run's parked waits are retired and all its claims shed, even past the page."""
    store.events.park_wait(sub("a", "w", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/2"), at=at(0))
    store.events.buffer(ev("e2", "k/3"), at=at(0))
    store.events.wait(sub("z", "held", "k/2"), at=at(1))
    store.events.claim_for(sub("z", "bare", "k/3"), at=at(1))
    store.events.subscribe(sub("z", "idle", "k/9"), at=at(1))
    store.runs.seal("z")
    assert ids(store.events.parked_waits(1)) == [("a", "w")]
    assert store.events.stats() == EventStats(
        live=0, claimed=0, consumed=2, dead=0, waits=2, parked=1
    )
    assert ids(store.events.waiting()) == [("a", "w"), ("z", "idle")]


def test_parked_waits_pages_through_many_marks(store):
    """More parked waits than one step lists are all returned, in order, NULs included."""
    effects = [f"{n:04d}\x00" for n in range(300)]
    for e in effects:
        store.events.park_wait(sub("r", e, "k/1"), at=at(0))
    assert [s.effect for s in store.events.parked_waits(1000)] == effects
    assert len(store.events.parked_waits(299)) == 299


def test_a_parked_waits_step_stops_at_its_bytes_of_key_rows(raw):
    """Waits of long identifiers (a key row repeats its wait's, 4 KiB each here) list
    a few a step, past the first, whatever the room: all of them, in order, in more
    steps than waits of short ones take."""
    from agentplane_redis import RedisStore

    store = RedisStore(raw, tenant="long-rows")
    long_ = "x" * 4000
    runs = [f"{n:02d}{long_}" for n in range(12)]
    for run in runs:
        store.events.park_wait(sub(run, long_, "k/1", f"ns/{long_}", case=long_), at=at(0))
    real, statuses = store._driver.execute, []

    def execute(call: Any, *more: Any) -> Any:
        reply = real(call, *more)
        if call.script == "parked_waits" and bytes(reply[0]) != b"NEED":  # not their buckets
            statuses.append(bytes(reply[0]))
        return reply

    store._driver.execute = execute  # type: ignore[method-assign]
    assert [s.run for s in store.events.parked_waits(100)] == runs
    assert statuses[0] == b"PART"
    assert 3 <= len(statuses) <= 6, statuses


# ------------------------------------------------------------ 3.12 minter


def test_minter_survives_every_transition(store):
    """None without a row; Minter(None) for wire events; the operator otherwise."""
    assert store.events.minter("src", "e1") is None
    store.events.buffer(ev("wire", "k/1"), at=at(0))
    assert store.events.minter("src", "wire") == Minter(None)
    op = Operator("ann", "on call")
    store.events.buffer(ev("e1", "k/1", by=op), at=at(1))
    store.events.wait(sub("r", "w", "k/1"), at=at(2))
    store.events.wait(sub("r", "v", "k/1"), at=at(2))
    assert store.events.minter("src", "e1") == Minter(op)
    store.events.unsubscribe_run("r", ["v"])
    assert store.events.minter("src", "e1") == Minter(op)
    store.events.erase_payload("src", "e1")
    assert store.events.minter("src", "e1") == Minter(op)


# ------------------------------------------------------------ 3.13 erase_payload


def test_erasing_a_live_event_dead_letters_it(store):
    """A live row becomes a dead letter "erased", null payload, and the sweep skips it."""
    assert store.events.erase_payload("src", "nothing") is False
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    assert store.events.erase_payload("src", "e1") is True
    [dead] = store.events.dead_letters()
    assert (dead.event.payload, dead.reason, dead.received_at) == (None, "erased", at(0))
    assert store.events.sweep_unclaimed(at(10)) == 0
    assert store.events.erase_payload("src", "e1") is True
    assert not store.events.buffer(ev("e1", "k/1"), at=at(1))


def test_erasing_a_held_event_unparks_the_holder_and_key_sharing_siblings(store):
    """The holder and parked siblings sharing a key (without claims) become matchable again."""
    store.events.subscribe(sub("r", "holder", "k/1"), at=at(0))
    store.events.park_wait(sub("r", "sibling", "k/1"), at=at(1))
    store.events.park_wait(sub("r", "unrelated", "k/9"), at=at(1))
    store.events.buffer(ev("mine", "k/1"), at=at(0))
    store.events.buffer(ev("e1", "k/1"), at=at(2))
    store.events.wait(sub("r", "claimer", "k/1"), at=at(3))  # takes "mine"
    store.events.match_waiter(ev("e1"), at=at(4))  # holder takes e1
    assert store.events.erase_payload("src", "e1")
    assert ids(store.events.parked_waits()) == [("r", "claimer"), ("r", "unrelated")]
    [dead] = store.events.dead_letters()
    assert (dead.event.id, dead.reason, dead.event.payload) == ("e1", "erased", None)
    # Unparked waits are matchable again at their original registration times.
    assert store.events.deliver(ev("e2", "k/1"), at=at(5)).subscription.effect == "holder"
    assert store.events.deliver(ev("e3", "k/1"), at=at(5)).subscription.effect == "sibling"


def test_erasing_consumed_and_dead_rows_changes_only_the_payload(store):
    """A consumed row keeps its state; a dead row keeps its reason and listing."""
    store.events.buffer(ev("c", "k/1"), at=at(0))
    store.events.wait(sub("r", "w", "k/1"), at=at(1))
    store.events.unsubscribe("r", "w")
    store.events.buffer(ev("d", "k/2"), at=at(0))
    store.events.sweep_unclaimed(at(0), "too late")
    assert store.events.erase_payload("src", "c")
    assert store.events.erase_payload("src", "d")
    assert store.events.stats() == EventStats(
        live=0, claimed=0, consumed=1, dead=1, waits=0, parked=0
    )
    [dead] = store.events.dead_letters()
    assert (dead.event.id, dead.reason, dead.event.payload) == ("d", "too late", None)


def test_an_erased_payload_is_never_handed_to_a_waiter(store):
    """After erasure no wait gets the event."""
    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.erase_payload("src", "e1")
    assert store.events.wait(sub("r", "w", "k/1"), at=at(1)) is None
    assert store.events.deliver(ev("e1", "k/1"), at=at(2)) == Duplicate()


# ------------------------------------------------------------ 3.14 sweep, 3.15 dead letters


def test_sweep_is_inclusive_and_touches_only_live_rows(store):
    """received_at <= older_than is retired with the reason verbatim; held rows are not."""
    store.events.buffer(ev("at-cutoff", "k/1"), at=at(10))
    store.events.buffer(ev("after", "k/1"), at=at(11))
    store.events.buffer(ev("held", "k/2"), at=at(0))
    store.events.wait(sub("r", "w", "k/2"), at=at(1))
    assert store.events.sweep_unclaimed(at(10), "grace 10ms") == 1
    assert store.events.sweep_unclaimed(at(10), "grace 10ms") == 0
    [dead] = store.events.dead_letters()
    assert (dead.event.id, dead.reason, dead.received_at) == ("at-cutoff", "grace 10ms", at(10))
    assert dead.event.correlation == ev("x", "k/1").correlation


def test_an_empty_reason_reads_unclaimed(store):
    """An empty stored reason is listed as "unclaimed"."""
    store.events.buffer(ev("e1"), at=at(0))
    store.events.sweep_unclaimed(at(0), "")
    assert store.events.dead_letters()[0].reason == "unclaimed"


def test_sweep_returns_the_total_across_steps(store):
    """A backlog larger than one step is swept completely, oldest first."""
    n = SWEEP_BATCH * 2 + 7
    for i in range(n):
        store.events.buffer(ev(f"e{i:05d}", "k/1"), at=at(i))
    assert store.events.sweep_unclaimed(at(n)) == n
    assert store.events.stats().dead == n


def test_dead_letters_are_newest_first_with_byte_tie_breaks(store):
    """Order (received_at, source, id) descending, at most limit."""
    store.events.buffer(ev("a", source="s"), at=at(5))
    store.events.buffer(ev("b", source="s"), at=at(5))
    store.events.buffer(ev("z", source="r"), at=at(5))
    store.events.buffer(ev("old", source="s"), at=at(1))
    store.events.sweep_unclaimed(at(5))
    assert ids(store.events.dead_letters()) == ["b", "a", "z", "old"]
    assert ids(store.events.dead_letters(2)) == ["b", "a"]
    assert store.events.dead_letters(0) == []


# ------------------------------------------------------------ 3.16 waiting


def test_waiting_lists_key_rows_in_registration_order(store):
    """(created_at, run, effect, namespace, value); parked and sealed included; bare never."""
    store.events.subscribe(sub("b", "w", "k/2", "k/1"), at=at(1))
    store.events.subscribe(sub("a", "w", "k/3"), at=at(1))
    store.events.subscribe(sub("c", "w", "k/0"), at=at(0))
    store.events.park_wait(sub("d", "w", "k/4"), at=at(2))
    store.runs.seal("c")
    store.events.buffer(ev("e", "z/1"), at=at(0))
    store.events.claim_for(sub("bare", "w", "z/1"), at=at(3))
    got = [(s.run, s.correlation[0].value) for s in store.events.waiting()]
    assert got == [("c", "0"), ("a", "3"), ("b", "1"), ("b", "2"), ("d", "4")]
    assert len(store.events.waiting(2)) == 2
    assert store.events.waiting(0) == []


# ------------------------------------------------------------ 3.17 purge, 8 retention


def test_purge_removes_dead_and_consumed_rows_oldest_first(store):
    """Only dead and consumed rows at or before the cutoff, up to limit, oldest first."""
    store.events.buffer(ev("dead-old", "k/1"), at=at(0))
    store.events.sweep_unclaimed(at(0))
    store.events.buffer(ev("consumed", "k/2"), at=at(1))
    store.events.wait(sub("r", "w", "k/2"), at=at(2))
    store.events.unsubscribe("r", "w")
    store.events.buffer(ev("dead-late", "k/3"), at=at(50))
    store.events.sweep_unclaimed(at(50))
    store.events.buffer(ev("live", "k/4"), at=at(0))
    store.events.buffer(ev("held", "k/5"), at=at(0))
    store.events.wait(sub("r", "h", "k/5"), at=at(1))
    assert store.events.purge(at(10), limit=1) == 1
    assert store.events.minter("src", "dead-old") is None
    assert store.events.minter("src", "consumed") is not None
    assert store.events.purge(at(10)) == 1
    assert store.events.purge(at(10)) == 0
    assert store.events.purge(at(100), limit=0) == 0
    assert store.events.stats() == EventStats(
        live=1, claimed=1, consumed=0, dead=1, waits=1, parked=1
    )


def test_after_a_purge_the_pair_is_new_again(store):
    """The dedup horizon equals the retention horizon, erased rows included."""
    store.events.buffer(ev("e1", "k/1", payload={"v": 1}), at=at(0))
    store.events.erase_payload("src", "e1")
    assert store.events.purge(at(0)) == 1
    assert store.events.minter("src", "e1") is None
    assert store.events.buffer(ev("e1", "k/1", payload={"v": 2}), at=at(1))
    assert store.events.claim_for(sub("r", "w", "k/1"), at=at(2)).event.payload == {"v": 2}


def test_purge_walks_more_than_one_step(store):
    """A purge larger than one step removes everything asked for."""
    for i in range(300):
        store.events.buffer(ev(f"e{i:04d}"), at=at(i))
    store.events.sweep_unclaimed(at(1000))
    assert store.events.purge(at(1000), limit=290) == 290
    assert ids(store.events.dead_letters()) == [
        "e0299",
        "e0298",
        "e0297",
        "e0296",
        "e0295",
        "e0294",
        "e0293",
        "e0292",
        "e0291",
        "e0290",
    ]


def test_rows_with_large_payloads_are_swept_and_purged_a_few_a_step(store):
    """A row holds its payload, so the sweep and purge read rows up to a byte budget
    a step; every row still goes, oldest first, in steps of fewer rows."""
    big = {"blob": "x" * 600_000}
    for i in range(5):
        store.events.buffer(ev(f"e{i}", payload=big), at=at(i))
    store.events.buffer(ev("small"), at=at(5))
    assert store.events.sweep_unclaimed(at(10)) == 6
    assert [d.event.payload == big for d in store.events.dead_letters()] == [False] + [True] * 5
    assert store.events.purge(at(3), limit=1000) == 4
    assert ids(store.events.dead_letters()) == ["small", "e4"]
    assert store.events.purge(at(10), limit=1000) == 2
    assert store.events.stats().dead == 0


# ------------------------------------------------------------ 6 tenancy


def test_tenants_are_independent(make):
    """The same pair, waits and seals in two tenants never meet."""
    a, b = make("tenant-a"), make("tenant-b")
    assert a.events.buffer(ev("e1", "k/1"), at=at(0))
    assert b.events.buffer(ev("e1", "k/1"), at=at(0))
    a.events.erase_payload("src", "e1")
    assert b.events.claim_for(sub("r", "w", "k/1"), at=at(1)).event.payload == {"id": "e1"}
    b.events.subscribe(sub("r2", "w", "k/2"), at=at(2))
    assert a.events.deliver(ev("e2", "k/2"), at=at(3)) == Buffered()
    a.events.subscribe(sub("r2", "w", "k/2"), at=at(2))
    assert ids(a.events.waiting()) == [("r2", "w")]
    assert ids(b.events.waiting()) == [("r2", "w")]
    a.runs.seal("r2")
    assert not b.runs.is_sealed("r2")
    assert b.events.deliver(ev("e3", "k/2"), at=at(4)).subscription.run == "r2"
    assert a.events.stats() == EventStats(live=1, claimed=0, consumed=0, dead=1, waits=1, parked=0)
    assert a.events.dead_letters()[0].event.id == "e1"
    assert b.events.dead_letters() == []
    assert a.events.purge(at(100)) == 1
    assert b.events.minter("src", "e1") == Minter(None)


def test_tenant_names_are_trimmed(make):
    """ " acme " and "acme" are one tenant."""
    make(" acme ").events.buffer(ev("e1"), at=at(0))
    assert make("acme").tenant == "acme"
    assert not make("acme").events.buffer(ev("e1"), at=at(0))


# ------------------------------------------------------------ 2.2 clocks


def test_the_server_clock_stamps_when_at_is_left_out(store, raw):
    """clock="server": received_at comes from Redis TIME, within the test's window."""
    seconds, micros = raw.time()
    server_now = at(0).fromtimestamp(seconds + micros / 1e6, tz=at(0).tzinfo)
    store.events.buffer(ev("e1", "k/1"))
    got = store.events.claim_for(sub("r", "w", "k/1"))
    assert abs(got.received_at - server_now) < timedelta(seconds=30)
    assert got.received_at.microsecond % 1000 == 0


def test_the_client_clock_and_an_explicit_instant(make):
    """clock="client" reads the local clock; an explicit at always wins."""
    store = make("acme", clock="client")
    before = datetime.now(timezone.utc) - timedelta(milliseconds=1)
    store.events.buffer(ev("e1", "k/1"))
    store.events.buffer(ev("e2", "k/2"), at=at(7))
    got = store.events.claim_for(sub("r", "w", "k/1"))
    assert before <= got.received_at <= datetime.now(timezone.utc)
    assert store.events.claim_for(sub("r", "v", "k/2")).received_at == at(7)


def test_instants_keep_milliseconds_and_negative_times_order(store):
    """Sub-millisecond digits are dropped; instants before 1970 sort before later ones."""
    early = datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)
    ancient = datetime(1, 1, 1, tzinfo=timezone.utc)
    store.events.buffer(ev("late", "k/1"), at=at(0))
    store.events.buffer(ev("early", "k/1"), at=early)
    store.events.buffer(ev("ancient", "k/1"), at=ancient)
    got = [store.events.wait(sub("r", f"w{n}", "k/1")) for n in range(3)]
    assert [g.event.id for g in got] == ["ancient", "early", "late"]
    assert got[1].received_at == early.replace(microsecond=999_000)
    assert got[0].received_at == ancient


def test_oldest_live_is_when_the_oldest_unclaimed_event_arrived(store):
    """oldest_live: None on an empty store; the received_at of the oldest live row,
    which moves on as rows are claimed or swept."""
    assert store.events.oldest_live() is None
    store.events.buffer(ev("e1", "k/1"), at=at(5))
    store.events.buffer(ev("e2", "k/2"), at=at(9))
    assert store.events.oldest_live() == at(5)
    store.events.claim_for(sub("r", "w", "k/1"), at=at(10))
    assert store.events.oldest_live() == at(9)
    store.events.sweep_unclaimed(at(9))
    assert store.events.oldest_live() is None


def test_lookup_shows_one_event_in_every_state(store):
    """events.lookup: state, holder, claim time, reason and marks, as stored."""
    from agentplane_redis import EventRecord

    assert store.events.lookup("src", "e1") is None
    store.events.buffer(ev("e1", "k/1"), at=at(1))
    live = store.events.lookup("src", "e1")
    assert live == EventRecord(ev("e1", "k/1"), at(1), "live", None, None, None, False, False)
    store.events.wait(sub("r", "w", "k/1"), at=at(2))
    held = store.events.lookup("src", "e1")
    assert (held.state, held.holder, held.claimed_at) == ("held", ("r", "w"), at(2))
    wait = store.events.lookup_wait("r", "w")
    assert (wait.subscription.run, wait.parked_at, wait.holds) == ("r", at(2), ("src", "e1"))
    store.events.erase_payload("src", "e1")
    dead = store.events.lookup("src", "e1")
    assert (dead.state, dead.reason, dead.erased, dead.event.payload) == (
        "dead",
        "erased",
        True,
        None,
    )
    assert store.events.lookup_wait("r", "nope") is None


def test_a_parked_wait_is_in_no_election_index_however_it_was_registered(store, raw, backend):
    """A wait that ``wait`` or ``park_wait`` parks is out of the election indexes,
    whether the call registered it or an earlier ``subscribe`` did (and put it up
    for election): the raw keys hold every invariant, and a later event buffers."""
    from audit import Audit

    store.events.buffer(ev("e1", "order/1"), at=at(0))
    store.events.buffer(ev("e2", "order/2"), at=at(0))
    store.events.subscribe(sub("r2", "w", "order/2", "order/9"), at=at(1))
    assert store.events.wait(sub("r1", "w", "order/1"), at=at(2)) is not None  # new
    assert store.events.wait(sub("r2", "w", "order/2"), at=at(2)) is not None  # earlier
    store.events.park_wait(sub("r3", "w", "order/3", from_source="src"), at=at(3))  # new
    store.events.subscribe(sub("r4", "w", "order/4"), at=at(4))
    store.events.park_wait(sub("r4", "w", "order/4", "order/5"), at=at(5))  # earlier
    for n in range(1, 6):
        outcome = store.events.deliver(ev(f"later-{n}", f"order/{n}"), at=at(6))
        assert isinstance(outcome, Buffered), (n, outcome)
    assert isinstance(store.events.deliver(ev("later-9", "order/9"), at=at(6)), Buffered)
    assert store.events.stats().parked == 4
    Audit(raw, backend.tenant).run()


# ------------------------------------------------------------ 11 revive


def test_revive_brings_a_dead_letter_back_live_at_its_new_instant(store):
    """revive: the dead row is live again, received at `at` (the sweep's grace starts
    anew), payload and minter kept; no wait: Buffered, and a wait then claims it."""
    from agentplane_redis import Buffered

    store.events.buffer(ev("e1", "k/1", payload={"n": 1}), at=at(0))
    assert store.events.sweep_unclaimed(at(0), "nobody") == 1
    assert store.events.revive("src", "e1", at=at(50)) == Buffered()
    assert store.events.dead_letters() == []
    assert store.events.sweep_unclaimed(at(49)) == 0  # received at 50 now
    got = store.events.wait(sub("r", "w", "k/1"), at=at(60))
    assert (got.event.id, got.event.payload, got.received_at) == ("e1", {"n": 1}, at(50))
    assert not store.events.buffer(ev("e1", "k/1"), at=at(70))  # the same identity


def test_revive_resumes_the_oldest_waiting_run_as_deliver_does(store):
    """With waits registered, revive elects one exactly as deliver would."""
    from agentplane_redis import Resumed

    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.sweep_unclaimed(at(0))
    store.events.subscribe(sub("r2", "w", "k/1"), at=at(2))
    store.events.subscribe(sub("r1", "w", "k/1"), at=at(1))
    outcome = store.events.revive("src", "e1", at=at(10))
    assert isinstance(outcome, Resumed)
    assert outcome.subscription.run == "r1"
    assert store.events.claim_for(sub("r1", "w", "k/1"), at=at(11)).event.id == "e1"


def test_revive_answers_none_for_a_row_that_is_not_dead(store):
    """Never seen, live, held or consumed: None, and nothing changes; an erased dead
    letter revives with its payload still null."""
    assert store.events.revive("src", "never") is None
    store.events.buffer(ev("live", "k/1"), at=at(0))
    assert store.events.revive("src", "live") is None
    store.events.buffer(ev("held", "k/2"), at=at(0))
    store.events.wait(sub("r", "w", "k/2"), at=at(1))
    assert store.events.revive("src", "held") is None
    store.events.unsubscribe("r", "w")  # consumed
    assert store.events.revive("src", "held") is None
    store.events.buffer(ev("gone", "k/3", payload={"secret": 1}), at=at(0))
    store.events.erase_payload("src", "gone")
    store.events.revive("src", "gone", at=at(5))
    assert store.events.wait(sub("r", "x", "k/3"), at=at(6)).event.payload is None


def test_an_erased_dead_letter_revives_as_a_row_of_a_null_payload(store, raw, backend):
    """A live row is never erased: revive clears the mark, and the row keeps a JSON
    null where the erased one kept nothing, as the auditor checks (live, or resumed
    and then consumed)."""
    from audit import Audit

    from agentplane_redis import Buffered

    for id_, key in (("live", "k/1"), ("held", "k/2")):
        store.events.buffer(ev(id_, key, payload={"secret": 1}), at=at(0))
        assert store.events.erase_payload("src", id_)
    store.events.subscribe(sub("r", "w", "k/2"), at=at(1))
    assert store.events.revive("src", "live", at=at(5)) == Buffered()
    assert store.events.revive("src", "held", at=at(5)) != Buffered()
    for id_ in ("live", "held"):
        found = store.events.lookup("src", id_)
        assert (found.erased, found.event.payload) == (False, None), id_
    Audit(raw, backend.tenant).run()
    assert store.events.claim_for(sub("r", "w", "k/2"), at=at(6)).event.payload is None
    store.events.unsubscribe("r", "w")
    assert store.events.erase_payload("src", "live")  # erased again: dead again
    Audit(raw, backend.tenant).run()
