"""Timer buckets grow with the tenant (docs/keys.md, "Timer buckets"), over every
backend and flavour: rows move by linear hashing, a store that learned an older
geometry is told the new one and calls again, nothing is lost or found twice."""

from __future__ import annotations

from audit import Audit

from agentplane_redis.keys import BUCKET_BASE, BUCKET_LOAD, Geometry, bucket_hash

from helpers import at, timer

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
