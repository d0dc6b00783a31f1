"""The timer store and run closing (contract sections 4-5), over every backend and flavour."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agentplane_redis import Closed, EventStats, InvalidInput, Phase, Retired, Timer
from agentplane_redis.ops import TIMER_SCAN

from helpers import at, ev, ids, paged, sub, timer

MINUTE = 60_000


def claimed(store, now_ms, **kw):
    return ids(store.timers.claim_due(now=at(now_ms), **kw))


# ------------------------------------------------------------ 4.1 arm


def test_first_arming_wins_even_over_a_claimed_timer(store):
    """arm answers False and changes nothing when (run, effect) exists, claimed or not."""
    assert store.timers.arm(timer("r", "t", 100, step=2, phase=Phase.COMPENSATING, case="c"))
    assert not store.timers.arm(timer("r", "t", 5))
    assert claimed(store, 100) == [("r", "t")]
    assert not store.timers.arm(timer("r", "t", 0))
    assert store.timers.armed("r") == [Timer("r", "t", at(100), 2, Phase.COMPENSATING, "c")]
    assert claimed(store, 100 + MINUTE - 1) == []


def test_after_disarm_arming_creates_a_fresh_timer(store):
    """Disarm, then arm: a new, unclaimed timer with the new fire_at."""
    store.timers.arm(timer("r", "t", 0))
    store.timers.claim_due(now=at(0))
    assert store.timers.disarm("r", "t")
    assert store.timers.arm(timer("r", "t", 50))
    assert claimed(store, 50) == [("r", "t")]


# ------------------------------------------------------------ 4.2 claim_due


def test_a_timer_is_due_at_its_fire_at_to_the_millisecond(store):
    """Due iff fire_at <= now."""
    store.timers.arm(timer("r", "t", 1000))
    assert claimed(store, 999) == []
    assert claimed(store, 1000) == [("r", "t")]


def test_claims_come_soonest_first_with_stored_fields(store):
    """(fire_at, run, effect) ascending; the stored fire_at, step, phase and case."""
    store.timers.arm(timer("b", "x", 5, step=1))
    store.timers.arm(timer("a", "y", 5, case="k"))
    store.timers.arm(timer("a", "x", 5, phase=Phase.COMPENSATING))
    store.timers.arm(timer("z", "z", 1))
    got = store.timers.claim_due(now=at(10))
    assert got == [
        Timer("z", "z", at(1)),
        Timer("a", "x", at(5), phase=Phase.COMPENSATING),
        Timer("a", "y", at(5), case="k"),
        Timer("b", "x", at(5), step=1),
    ]


def test_limit_bounds_claims_and_held_timers_never_hide_due_ones(store):
    """Timers under a live lease neither fill the page nor hide later due timers."""
    for n in range(5):
        store.timers.arm(timer("held", f"{n}", n))
    store.timers.claim_due(now=at(10), limit=5)
    store.timers.arm(timer("free", "a", 6))
    store.timers.arm(timer("free", "b", 7))
    store.timers.arm(timer("free", "c", 8))
    assert claimed(store, 11, limit=2) == [("free", "a"), ("free", "b")]
    assert claimed(store, 11, limit=2) == [("free", "c")]
    assert store.timers.claim_due(now=at(11), limit=0) == []


def test_a_lease_expires_at_exactly_claimed_at_plus_lease(store):
    """Skipped for every now < claimed_at + lease, claimable again at exactly that instant."""
    store.timers.arm(timer("r", "t", 0))
    assert claimed(store, 1000, lease=timedelta(seconds=2)) == [("r", "t")]
    assert claimed(store, 2999) == []
    assert claimed(store, 3000, lease=0.5) == [("r", "t")]
    assert claimed(store, 3499) == []
    assert claimed(store, 3500) == [("r", "t")]


def test_the_default_lease_is_the_stores_timer_lease(make):
    """timer_lease applies when a call gives no lease; 60 s unless configured."""
    default, short = make("acme"), make("other", timer_lease=timedelta(seconds=5))
    for store in (default, short):
        store.timers.arm(timer("r", "t", 0))
        store.timers.claim_due(now=at(0))
    assert claimed(default, MINUTE - 1) == []
    assert claimed(default, MINUTE) == [("r", "t")]
    assert claimed(short, 4999) == []
    assert claimed(short, 5000) == [("r", "t")]


def test_each_claim_is_judged_by_its_own_lease_against_this_calls_now(store):
    """A caller whose clock lags sees the lease as live, even after another restored it."""
    store.timers.arm(timer("r", "t", 0))
    store.timers.arm(timer("r", "u", 0))
    store.timers.claim_due(now=at(100), lease=timedelta(milliseconds=1))  # held until 101
    store.timers.claim_due(now=at(0), limit=0)
    assert claimed(store, 101, limit=1, lease=1000) == [("r", "t")]  # restores u too
    assert claimed(store, 100) == []  # the lagging caller still sees u's lease as live
    assert claimed(store, 101) == [("r", "u")]


def test_sealed_runs_timers_are_retired_at_claim_time(store):
    """A sealed run's timers are deleted when walked, held or not, and do not count."""
    store.timers.arm(timer("sealed", "held", 0))
    store.timers.claim_due(now=at(0))
    store.timers.arm(timer("sealed", "free", 1))
    store.timers.arm(timer("sealed", "later", 1000))
    store.timers.arm(timer("live", "t", 2))
    store.runs.seal("sealed")
    assert store.timers.pending_count() == 4
    assert claimed(store, 5, limit=1) == [("live", "t")]
    assert ids(store.timers.pending()) == [("live", "t"), ("sealed", "later")]
    assert store.timers.pending_count() == 2


def test_a_large_held_backlog_is_passed_in_bounded_steps(store):
    """More due timers than one step examines, most of them held, are all handled."""
    n = TIMER_SCAN * 2 + 3
    for i in range(n):
        store.timers.arm(timer("r", f"{i:05d}", i))
    first = store.timers.claim_due(now=at(n), limit=n - 2)
    assert len(first) == n - 2
    store.timers.arm(timer("r", "late", n))
    assert claimed(store, n, limit=10) == [
        ("r", f"{n - 2:05d}"),
        ("r", f"{n - 1:05d}"),
        ("r", "late"),
    ]
    assert len(store.timers.claim_due(now=at(n + MINUTE), limit=n + 5)) == n + 1


def test_claim_due_reads_the_server_clock(store, raw):
    """With now left out, due means fire_at <= the server's TIME."""
    seconds, _ = raw.time()
    server_now = datetime.fromtimestamp(seconds, timezone.utc)
    store.timers.arm(Timer("r", "past", server_now - timedelta(minutes=1)))
    store.timers.arm(Timer("r", "future", server_now + timedelta(days=1)))
    assert ids(store.timers.claim_due()) == [("r", "past")]


# ------------------------------------------------------------ 4.3-4.8


def test_disarm_removes_whoever_holds_it(store):
    """disarm answers whether a timer existed; a sweep never finds it again."""
    store.timers.arm(timer("r", "t", 0))
    store.timers.claim_due(now=at(0))
    assert store.timers.disarm("r", "t") is True
    assert store.timers.disarm("r", "t") is False
    assert claimed(store, 10 * MINUTE) == []
    assert store.timers.pending_count() == 0


def test_disarm_many_removes_each_once_and_counts_what_existed(store):
    """A batch completion: held or not, each timer goes once; unknown and repeated pairs
    count nothing; other timers stay; more than one step of pairs is one call."""
    for i in range(300):
        store.timers.arm(timer("r", f"t{i:03}", i))
    store.timers.arm(timer("other", "t000", 10 * MINUTE))
    page = store.timers.claim_due(now=at(299), limit=100)
    assert len(page) == 100
    held_and_not = [*page, ("r", "t250"), ("r", "t250"), ("nobody", "t"), ("r\x00", "t")]
    assert store.timers.disarm_many(held_and_not) == 101
    assert store.timers.disarm_many(page) == 0
    assert store.timers.disarm_many(("r", f"t{i:03}") for i in range(300)) == 199
    assert store.timers.disarm_many([]) == 0
    assert ids(store.timers.pending()) == [("other", "t000")]
    assert claimed(store, 10 * MINUTE) == [("other", "t000")]


def test_the_disarm_many_script_refuses_an_unbounded_step_whoever_sends_it(store, raw):
    """The script itself bounds a step at 256 ids, counting the ids asked for, not the
    timers found, and refuses a bucket's count its ids do not follow: a client that
    skips the store's batching is refused before anything is written."""
    from agentplane_redis.keys import tuple_member
    from agentplane_redis.ops import bucket_index, script_keys
    from agentplane_redis.scripts import library

    store.timers.arm(timer("r", "t", 0))  # one timer: the tenant's first buckets
    keys = list(script_keys(store.keys, "disarm_many"))
    slot = bucket_index("disarm_many")
    keys[slot - 1] = store.keys.timer_bucket("r")
    function = library().functions["disarm_many"]
    raw.function_load(library().source, replace=True)  # where the store sends scripts

    def step(*args):
        reply = raw.fcall(function, len(keys), *keys, *args, "0 0", "lane", "+1")
        return reply if isinstance(reply, list) else [reply]

    absent = [tuple_member(("nobody", f"t{i}")) for i in range(257)]
    for args in ([slot, 257, *absent], [slot, 200, *absent[:200], slot, 57, *absent[200:]]):
        refused = step(*args)
        assert refused[0] in (b"REFUSED", "REFUSED"), refused
    assert step(slot, 2, tuple_member(("r", "t")))[0] in (b"REFUSED", "REFUSED")
    assert step(slot - 1, 1, tuple_member(("r", "t")))[0] in (b"REFUSED", "REFUSED")
    assert ids(store.timers.pending()) == [("r", "t")]


def test_a_lane_answers_its_call_again_and_refuses_a_stale_copy(store, raw):
    """A writing call's reply is remembered in its lane under the call's number: the
    same call re-sent answers it without running; a copy of an earlier call, sent
    after the lane went on, is refused and writes nothing; a later number runs."""
    from agentplane_redis.codec import reply_list
    from agentplane_redis.ops import bucket_index, script_keys
    from agentplane_redis.scripts import library

    store.timers.arm(timer("r", "t", 0))  # the tenant's first buckets
    keys = list(script_keys(store.keys, "arm"))
    keys[bucket_index("arm") - 1] = store.keys.timer_bucket("r")
    function = library().functions["arm"]
    raw.function_load(library().source, replace=True)  # where the store sends scripts

    def arm(effect, number):
        args = ("r", effect, str(1767225600000), "0", "forward", "", "0 0")
        reply = raw.fcall(function, len(keys), *keys, *args, "lane-1", number)
        status = reply_list(reply)[0]
        return status.decode() if isinstance(status, bytes) else status

    assert arm("a", "+5") == "NEW"
    assert arm("a", "5") == "NEW"  # answered again: not a duplicate
    assert arm("b", "+6") == "NEW"
    assert arm("c", "5") == "REFUSED"  # a stale copy: the lane answered 6
    assert arm("b", "6") == "NEW"
    assert arm("a", "7") == "SEEN"  # a later call runs
    assert ids(store.timers.pending()) == [("r", "a"), ("r", "b"), ("r", "t")]


def test_disarm_many_refuses_what_is_not_a_pair_before_any_call(store):
    store.timers.arm(timer("r", "t", 0))
    for bad in (timer("r", "t", 0), "rt", [("r",)], [("r", "t", "x")], [("r", "")], [None]):
        with pytest.raises(InvalidInput):
            store.timers.disarm_many(bad)
    assert store.timers.pending_count() == 1


def test_disarm_run_counts_and_spares_other_runs(store):
    """Every timer of the run goes; other runs' stay."""
    for effect in ("a", "b", "c"):
        store.timers.arm(timer("r", effect, 0))
    store.timers.arm(timer("r2", "a", 0))
    store.timers.arm(timer("r\x00", "a", 0))
    store.timers.claim_due(now=at(0), limit=1)
    assert store.timers.disarm_run("r") == 3
    assert store.timers.disarm_run("r") == 0
    assert ids(store.timers.pending()) == [("r2", "a"), ("r\x00", "a")] or ids(
        store.timers.pending()
    ) == [("r\x00", "a"), ("r2", "a")]
    assert store.timers.pending_count() == 2


def test_pending_lists_all_timers_soonest_first(store):
    """Due and held timers included, exact fire_at, at most limit."""
    store.timers.arm(timer("b", "t", 7))
    store.timers.arm(timer("a", "t", 7))
    store.timers.arm(timer("c", "t", -5))
    store.timers.claim_due(now=at(0))
    assert ids(store.timers.pending()) == [("c", "t"), ("a", "t"), ("b", "t")]
    assert store.timers.pending()[0].fire_at == at(-5)
    assert len(store.timers.pending(2)) == 2
    assert store.timers.pending(0) == []


def test_armed_lists_one_run_in_effect_order(store):
    """armed(run): effect order, nothing of other runs."""
    for effect in ("b", "a", "c"):
        store.timers.arm(timer("r", effect, 0))
    store.timers.arm(timer("rr", "a", 0))
    assert [t.effect for t in store.timers.armed("r")] == ["a", "b", "c"]
    assert store.timers.armed("none") == []


def test_a_run_named_with_glob_characters_reaches_only_its_own_timers_and_waits(store):
    """A run's rows are picked by its name as a prefix: glob characters in it match
    only themselves, and a run whose name extends it is another run."""
    runs = ["r*", "r?", "r[a]", "r\\", "ra", "r[a]b", "r*x"]
    for run in runs:
        store.timers.arm(timer(run, "t", 0))
        store.events.subscribe(sub(run, "w", f"k/{runs.index(run)}"), at=at(0))
    assert [t.run for t in store.timers.armed("r*")] == ["r*"]
    assert store.timers.disarm_run("r[a]") == 1
    assert store.events.unsubscribe_run("r?") == Retired(1, ())
    closed = store.runs.close("r*")
    assert (closed.retired.waits, closed.timers) == (1, 1)
    left = ["r\\", "ra", "r[a]b", "r*x"]
    assert sorted(t.run for t in store.timers.pending()) == sorted([*left, "r?"])
    assert sorted(w.run for w in store.events.waiting()) == sorted([*left, "r[a]"])


def test_next_due_is_the_soonest_fire_at_even_if_past_or_held(store):
    """None when empty; else what pending(1) would return."""
    assert store.timers.next_due() is None
    store.timers.arm(timer("r", "t", 50))
    store.timers.arm(timer("r", "u", 10))
    store.timers.claim_due(now=at(20))
    assert store.timers.next_due() == at(10)


def test_pending_count_is_per_tenant(make):
    """Counts timers, not runs, of the handle's tenant only."""
    a, b = make("a"), make("b")
    a.timers.arm(timer("r", "1", 0))
    a.timers.arm(timer("r", "2", 0))
    b.timers.arm(timer("r", "1", 0))
    a.runs.seal("r")
    assert (a.timers.pending_count(), b.timers.pending_count()) == (2, 1)
    assert claimed(b, 0) == [("r", "1")]
    assert claimed(a, 0) == []
    assert (a.timers.pending_count(), b.timers.pending_count()) == (0, 1)


# ------------------------------------------------------------ 5 runs


def test_seal_first_wins_and_is_per_run(store):
    """seal answers True once; is_sealed reflects it."""
    assert not store.runs.is_sealed("r")
    assert store.runs.seal("r") is True
    assert store.runs.seal("r") is False
    assert store.runs.is_sealed("r")
    assert not store.runs.is_sealed("r2")


def test_close_retires_waits_claims_and_timers_together(store):
    """Sealed, no waits, marks, claims or timers; unanswered released, targeted dead."""
    store.events.buffer(ev("plain", "k/1"), at=at(0))
    store.events.wait(sub("r", "answered", "k/1"), at=at(1))
    store.events.buffer(ev("back", "k/2"), at=at(2))
    store.events.wait(sub("r", "unanswered", "k/2"), at=at(3))
    store.events.subscribe(sub("r", "targeted", "k/3"), at=at(4))
    store.events.deliver_to("r", ev("addressed", "k/3"), at=at(5))
    store.events.subscribe(sub("r", "idle", "k/4"), at=at(6))
    store.events.buffer(ev("bare", "k/5"), at=at(6))
    store.events.claim_for(sub("r", "bare", "k/5"), at=at(7))
    store.timers.arm(timer("r", "t1", 0))
    store.timers.arm(timer("r", "t2", 0))
    store.timers.arm(timer("other", "t", 0))
    store.timers.claim_due(now=at(0), limit=1)
    closed = store.runs.close("r", ["unanswered", "targeted", "nothing"])
    assert closed.retired.waits == 4
    assert [e.id for e in closed.retired.released] == ["back"]
    assert (closed.timers, closed.newly_sealed) == (2, True)
    assert store.runs.is_sealed("r")
    assert store.events.stats() == EventStats(
        live=1, claimed=0, consumed=2, dead=1, waits=0, parked=0
    )
    assert store.events.dead_letters()[0].reason == (
        "the run it was addressed to concluded without consuming it"
    )
    assert store.timers.armed("r") == []
    assert ids(store.timers.pending()) == [("other", "t")]
    assert store.runs.close("r", ["unanswered"]) == Closed(Retired(0, ()), 0, False)


def test_close_of_a_run_sealed_before_reports_not_newly_sealed(store):
    """close after seal still retires everything, and says the seal was not new."""
    store.events.subscribe(sub("r", "w", "k/1"), at=at(0))
    store.timers.arm(timer("r", "t", 0))
    store.runs.seal("r")
    assert store.runs.close("r") == Closed(Retired(1, ()), 1, False)


def test_state_written_after_close_is_caught_by_seals(store):
    """A sealed run's later waits are passed over; its parked waits retired; timers deleted."""
    store.runs.close("r")
    store.events.subscribe(sub("r", "late", "k/1"), at=at(0))
    store.events.park_wait(sub("r", "parked", "k/2"), at=at(0))
    store.timers.arm(timer("r", "t", 0))
    assert store.events.deliver(ev("e1", "k/1"), at=at(1)).__class__.__name__ == "Buffered"
    assert store.events.parked_waits() == []
    assert claimed(store, 1) == []
    assert store.timers.pending_count() == 0


def test_lookup_shows_a_timer_and_its_claim(store):
    """timers.lookup: the stored timer, and claimed_at and lease once claimed."""
    from datetime import timedelta

    from agentplane_redis import TimerRecord

    assert store.timers.lookup("r", "t") is None
    store.timers.arm(timer("r", "t", 5))
    assert store.timers.lookup("r", "t") == TimerRecord(timer("r", "t", 5), None, None)
    store.timers.claim_due(now=at(7), lease=timedelta(seconds=3))
    assert store.timers.lookup("r", "t") == TimerRecord(
        timer("r", "t", 5), at(7), timedelta(seconds=3), 1
    )


def test_a_timer_keeps_how_many_times_it_was_claimed(store):
    """Claim counts (contract 11): each claim_due that hands the timer out adds one;
    a live lease skipped adds none; re-arming after disarm starts at 0."""
    store.timers.arm(timer("r", "t", 0))
    for n in range(1, 4):
        assert claimed(store, n * MINUTE) == [("r", "t")]
        assert claimed(store, n * MINUTE + 1) == []  # the lease is live
        assert store.timers.lookup("r", "t").claims == n
    assert store.timers.disarm("r", "t")
    store.timers.arm(timer("r", "t", 0))
    assert store.timers.lookup("r", "t").claims == 0


# ------------------------------------------------------------ waking workers


def test_an_arm_sooner_than_every_timer_wakes_one_waiter(store):
    """arm pushes a "t" marker when its timer is the walk's new head, and only then;
    one marker wakes one waiter, and at most the two newest wait for one."""
    assert store.timers.wait_for_wake(0.05) is None
    store.timers.arm(timer("r", "a", 10 * MINUTE))  # the first timer
    assert store.timers.wait_for_wake(0.05) == "t"
    assert store.timers.wait_for_wake(0.05) is None  # taken by the first waiter
    store.timers.arm(timer("r", "later", 20 * MINUTE))
    store.timers.arm(timer("r", "a", 0))  # armed already: first arming wins
    assert store.timers.wait_for_wake(0.05) is None
    for n in range(5):
        store.timers.arm(timer("r", f"sooner{n}", 5 * MINUTE - n))
    assert [store.timers.wait_for_wake(0.05) for _ in range(3)] == ["t", "t", None]


def test_a_parked_wait_wakes_a_waiter_for_redelivery(store):
    """park_wait pushes an "r" marker."""
    store.events.park_wait(sub("r", "w", "k/1"), at=at(0))
    assert store.timers.wait_for_wake(0.05) == "r"


def test_wait_for_wake_refuses_a_timeout_it_cannot_keep(store):
    """A timeout is a number of seconds above 0 and at most a minute."""
    for bad in (0, -1, 61, "1", True, None):
        with pytest.raises(InvalidInput):
            store.timers.wait_for_wake(bad)


def test_next_claim_in_is_the_soonest_fire_time_or_lease_expiry(store):
    """next_claim_in: None without timers; else until the soonest unheld fire_at or
    lease expiry, by the store's clock (the server's)."""
    assert store.timers.next_claim_in() is None
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    store.timers.arm(Timer("r", "later", soon))
    left = store.timers.next_claim_in()
    assert timedelta(minutes=59) < left <= timedelta(hours=1)
    store.timers.arm(Timer("r", "due", datetime.now(timezone.utc) - timedelta(seconds=5)))
    assert store.timers.next_claim_in() <= timedelta(seconds=-4)
    assert [t.effect for t in store.timers.claim_due(lease=timedelta(minutes=10))] == ["due"]
    left = store.timers.next_claim_in()  # the lease's expiry comes before "later"
    assert timedelta(minutes=9) < left <= timedelta(minutes=10)


# ------------------------------------------------------------ 11 reschedule


def test_reschedule_moves_an_unheld_timer_and_wakes_for_a_sooner_one(store):
    """reschedule: True and the new fire_at (in every order: pending, claim_due);
    sooner than every timer, it wakes a waiter; False for a timer not armed."""
    store.timers.arm(timer("r", "a", 10 * MINUTE))
    store.timers.arm(timer("r", "b", 20 * MINUTE))
    store.timers.wait_for_wake(0.05)
    assert store.timers.reschedule("r", "b", at(5 * MINUTE))
    assert [(t.effect, t.fire_at) for t in store.timers.pending()] == [
        ("b", at(5 * MINUTE)),
        ("a", at(10 * MINUTE)),
    ]
    assert store.timers.wait_for_wake(0.05) == "t"
    assert store.timers.reschedule("r", "b", at(5 * MINUTE))  # idempotent
    assert store.timers.reschedule("r", "a", at(30 * MINUTE))  # later: no wake
    assert store.timers.wait_for_wake(0.05) is None
    assert claimed(store, 6 * MINUTE) == [("r", "b")]
    assert not store.timers.reschedule("r", "nope", at(0))
    assert not store.timers.reschedule("other", "a", at(0))


def test_reschedule_leaves_a_live_lease_alone_and_takes_a_lapsed_one(store):
    """A timer under a live lease: False, unchanged; once the lease lapsed: moved
    back to the walk at the new time, its claim count kept."""
    from datetime import timedelta

    store.timers.arm(timer("r", "t", 0))
    taken = store.timers.claim_due(lease=timedelta(days=1))  # now, by the server's clock
    assert [(t.run, t.effect) for t in taken] == [("r", "t")]
    assert not store.timers.reschedule("r", "t", at(0))
    assert store.timers.pending()[0].fire_at == at(0)
    store.timers.arm(timer("r", "u", 0))
    assert claimed(store, 0, lease=timedelta(milliseconds=1)) == [("r", "u")]
    assert store.timers.reschedule("r", "u", at(7 * MINUTE))
    assert claimed(store, 7 * MINUTE - 1) == []
    assert claimed(store, 7 * MINUTE) == [("r", "u")]
    assert store.timers.lookup("r", "u").claims == 2


def test_reschedule_refuses_bad_input(store):
    from agentplane_redis import InvalidInput

    for args in (("", "t", at(0)), ("r", "t", "soon"), ("r", "t", None)):
        with pytest.raises(InvalidInput):
            store.timers.reschedule(*args)


# ------------------------------------------------------------ 11 runs.lookup


def test_run_lookup_reads_a_run_s_whole_state(store):
    """runs.lookup: sealed or not, each wait (keys, parked, the event it holds), each
    timer (fire time, claim, claim count); other runs' state left out."""
    from datetime import timedelta

    store.events.buffer(ev("e1", "k/1"), at=at(0))
    store.events.wait(sub("r", "b", "k/1"), at=at(1))  # holds e1, parked
    store.events.subscribe(sub("r", "a", "k/2", "k/3"), at=at(2))
    store.events.subscribe(sub("other", "a", "k/2"), at=at(2))
    store.timers.arm(timer("r", "t2", 5))
    store.timers.arm(timer("r", "t1", 100 * MINUTE))
    store.timers.arm(timer("other", "t", 5))
    store.timers.claim_due(now=at(5), lease=timedelta(seconds=3))
    found = store.runs.lookup("r")
    assert (found.run, found.sealed, found.sealed_at) == ("r", False, None)
    assert [w.subscription.effect for w in found.waits] == ["a", "b"]
    a, b = found.waits
    assert [k.value for k in a.subscription.correlation] == ["2", "3"]
    assert (a.parked_at, a.holds) == (None, None)
    assert (b.parked_at, b.holds) == (at(1), ("src", "e1"))
    assert [(t.timer.effect, t.claims) for t in found.timers] == [("t1", 0), ("t2", 1)]
    assert found.timers[1].claimed_at == at(5)
    store.runs.seal("r")
    sealed = store.runs.lookup("r")
    assert sealed.sealed
    assert sealed.sealed_at is not None
    empty = store.runs.lookup("never")
    assert (empty.sealed, empty.waits, empty.timers) == (False, (), ())


def test_pending_pages_follow_the_walk_order_across_ties_and_held_timers(store):
    """pending_page: pages after a cursor add up to pending(), ties at one fire time
    and held timers in their places; a page after a timer since disarmed goes on
    after its place."""
    from datetime import timedelta

    for effect, fire in (("a", 5), ("b", 5), ("c", 5), ("d", 7), ("e", 9), ("f", 9), ("g", 11)):
        store.timers.arm(timer("r", effect, fire))
    store.timers.claim_due(now=at(7), limit=2, lease=timedelta(minutes=5))  # a, b held
    everything = store.timers.pending(100)
    assert paged(store.timers.pending_page, 3) == everything
    first, cursor = store.timers.pending_page(2)
    assert [t.effect for t in first] == ["a", "b"]
    assert store.timers.disarm("r", "b")
    rest, _ = store.timers.pending_page(100, cursor)
    assert [t.effect for t in rest] == ["c", "d", "e", "f", "g"]
    with pytest.raises(Exception, match="cursor"):
        store.timers.pending_page(3, "nonsense")


def test_timer_stats_count_armed_due_and_held(store):
    """timers.stats: every armed timer, the unheld ones due by the store's clock, and
    those under a lease."""
    from datetime import timedelta

    from agentplane_redis import TimerStats

    assert store.timers.stats() == TimerStats(0, 0, 0)
    for n in range(3):
        store.timers.arm(timer("r", f"past{n}", n))
    store.timers.arm(Timer("r", "future", datetime.now(timezone.utc) + timedelta(hours=1)))
    store.timers.claim_due(now=at(0), limit=1, lease=timedelta(days=1))
    assert store.timers.stats() == TimerStats(armed=4, due=2, held=1)
