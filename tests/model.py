"""A reference model of the contract in plain Python: the oracle for random sequences.

It keeps state the way the contract describes it (rows, waits, marks, the claim
ledger, seals, timers) with no indexes at all: every search is a scan sorted
by the contract's orders. Instants are whole milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agentplane_redis import (
    Buffered,
    BufferedEvent,
    Closed,
    CorrelationKey,
    DeadLetter,
    Duplicate,
    EventRecord,
    EventStats,
    InboundEvent,
    Matched,
    Minter,
    NotWaiting,
    Operator,
    Phase,
    Resumed,
    Retired,
    RunRecord,
    Subscription,
    Timer,
    TimerRecord,
    WaitRecord,
)
from agentplane_redis.codec import to_datetime

TARGETED_REASON = "the run it was addressed to concluded without consuming it"
Pair = tuple[str, str]


def b(*parts: str) -> tuple[bytes, ...]:
    """The byte order of the contract: UTF-8, compared part by part."""
    return tuple(p.encode("utf-8") for p in parts)


def dedup(keys: tuple[CorrelationKey, ...]) -> list[Pair]:
    out: list[Pair] = []
    for k in keys:
        if (k.namespace, k.value) not in out:
            out.append((k.namespace, k.value))
    return out


@dataclass
class Row:
    source: str
    id: str
    kind: str
    payload: Any
    keys: list[Pair]
    received_at: int
    by: Operator | None
    state: str = "live"
    holder: Pair | None = None
    claimed_at: int | None = None
    reason: str = ""
    erased: bool = False
    targeted: bool = False

    def event(self) -> InboundEvent:
        keys = sorted(self.keys, key=lambda k: b(*k))
        return InboundEvent(
            self.source,
            self.id,
            self.kind,
            self.payload,
            tuple(CorrelationKey(*k) for k in keys),
            self.by,
        )

    def order(self) -> tuple[Any, ...]:
        return (self.received_at, *b(self.source, self.id))


@dataclass
class Wait:
    kind: str
    step: int
    phase: Phase
    case: str | None
    from_source: str | None
    keys: dict[Pair, int] = field(default_factory=dict)


@dataclass
class TimerRow:
    fire_at: int
    step: int
    phase: Phase
    case: str | None
    claimed_at: int | None = None
    lease: int | None = None
    #: How many times claim_due handed it out.
    claims: int = 0


class Model:
    def __init__(self) -> None:
        self.rows: dict[Pair, Row] = {}
        self.waits: dict[Pair, Wait] = {}
        self.marks: dict[Pair, int] = {}
        self.ledger: dict[Pair, Pair] = {}
        self.seals: set[str] = set()
        self.timers: dict[Pair, TimerRow] = {}

    # ---------------------------------------------------------------- helpers

    def sub_of(self, wid: Pair, only: Pair | None = None) -> Subscription:
        w = self.waits[wid]
        keys = [only] if only else sorted(w.keys, key=lambda k: b(*k))
        return Subscription(
            wid[0],
            wid[1],
            w.kind,
            tuple(CorrelationKey(*k) for k in keys),
            w.step,
            w.phase,
            w.case,
            w.from_source,
        )

    def hold(self, eid: Pair, wid: Pair, at: int) -> None:
        row = self.rows[eid]
        row.state, row.holder, row.claimed_at = "held", wid, at
        self.ledger[wid] = eid
        self.marks[wid] = at

    def shed(self, eid: Pair) -> None:
        row = self.rows[eid]
        assert row.holder is not None
        del self.ledger[row.holder]
        row.state, row.payload = "consumed", None

    def kill(self, eid: Pair, reason: str) -> None:
        row = self.rows[eid]
        if row.state == "held":
            assert row.holder is not None
            del self.ledger[row.holder]
        row.state, row.holder, row.claimed_at, row.reason = "dead", None, None, reason

    def register(self, sub: Subscription, at: int) -> Wait:
        wid = (sub.run, sub.effect)
        w = self.waits.get(wid)
        if w is None:
            w = Wait(sub.kind, sub.step, Phase(sub.phase), sub.case, sub.from_source)
            self.waits[wid] = w
        for key in dedup(sub.correlation):
            w.keys.setdefault(key, at)
        return w

    def buffered(self, eid: Pair) -> BufferedEvent:
        row = self.rows[eid]
        return BufferedEvent(row.event(), to_datetime(row.received_at))

    # ---------------------------------------------------------------- events

    def buffer(self, ev: InboundEvent, at: int) -> bool:
        eid = (ev.source, ev.id)
        if eid in self.rows:
            return False
        self.rows[eid] = Row(
            ev.source, ev.id, ev.kind, ev.payload, dedup(ev.correlation), at, ev.by
        )
        return True

    def subscribe(self, sub: Subscription, at: int) -> None:
        self.register(sub, at)

    def claim_for(self, sub: Subscription, at: int) -> BufferedEvent | None:
        wid = (sub.run, sub.effect)
        keys = dedup(sub.correlation)
        if wid in self.ledger:
            row = self.rows[self.ledger[wid]]
            if (
                row.kind == sub.kind
                and sub.from_source in (None, row.source)
                and any(k in keys for k in row.keys)
            ):
                row.claimed_at = at
                self.marks[wid] = at
                return self.buffered((row.source, row.id))
            return None
        if wid in self.marks:
            return None
        for key in keys:
            found = [
                r
                for r in self.rows.values()
                if r.state == "live"
                and r.kind == sub.kind
                and key in r.keys
                and sub.from_source in (None, r.source)
            ]
            if found:
                row = min(found, key=Row.order)
                self.hold((row.source, row.id), wid, at)
                return self.buffered((row.source, row.id))
        return None

    def electable(self, wid: Pair, row: Row) -> bool:
        w = self.waits[wid]
        return (
            wid not in self.marks
            and wid[0] not in self.seals
            and w.kind == row.kind
            and w.from_source in (None, row.source)
        )

    def match_waiter(self, ev: InboundEvent, at: int) -> Subscription | None:
        row = self.rows.get((ev.source, ev.id))
        if row is None or row.state != "live":
            return None
        return self.elect(row, at)

    def elect(self, row: Row, at: int) -> Subscription | None:
        """The winner of a live row's election (2.3), which then holds it."""
        for key in row.keys:
            found = [
                (w.keys[key], *b(*wid), wid)
                for wid, w in self.waits.items()
                if key in w.keys and self.electable(wid, row)
            ]
            if found:
                wid = min(found)[-1]
                self.hold((row.source, row.id), wid, at)
                return self.sub_of(wid)
        return None

    def qualifies(self, wid: Pair, kind: str, source: str, keys: list[Pair]) -> bool:
        w = self.waits[wid]
        return w.kind == kind and w.from_source in (None, source) and any(k in keys for k in w.keys)

    def deliver_to(self, run: str, ev: InboundEvent, at: int) -> Any:
        eid = (ev.source, ev.id)
        row = self.rows.get(eid)
        if row is not None:
            if row.state == "held" and row.holder and row.holder[0] == run:
                wid = row.holder
                if wid in self.waits and self.qualifies(wid, row.kind, row.source, row.keys):
                    return Matched(self.sub_of(wid))
            return Duplicate()
        keys = dedup(ev.correlation)
        found = sorted(
            (
                wid
                for wid in self.waits
                if wid[0] == run
                and wid not in self.marks
                and self.qualifies(wid, ev.kind, ev.source, keys)
            ),
            key=lambda wid: b(wid[1]),
        )
        if not found:
            return NotWaiting()
        self.rows[eid] = Row(ev.source, ev.id, ev.kind, ev.payload, keys, at, ev.by, targeted=True)
        self.hold(eid, found[0], at)
        return Matched(self.sub_of(found[0]))

    def deliver(self, ev: InboundEvent, at: int) -> Any:
        row = self.rows.get((ev.source, ev.id))
        if row is not None and row.state != "live":
            return Duplicate()
        fresh = self.buffer(ev, at)
        sub = self.match_waiter(ev, at)
        if sub is not None:
            return Resumed(sub)
        return Buffered() if fresh else Duplicate()

    def wait(self, sub: Subscription, at: int) -> BufferedEvent | None:
        self.register(sub, at)
        return self.claim_for(sub, at)

    def unsubscribe(self, run: str, effect: str) -> None:
        wid = (run, effect)
        self.waits.pop(wid, None)
        self.marks.pop(wid, None)
        if wid in self.ledger:
            self.shed(self.ledger[wid])

    def unsubscribe_run(self, run: str, unanswered: list[str]) -> Retired:
        mine = [wid for wid in self.waits if wid[0] == run]
        for wid in mine:
            del self.waits[wid]
        for wid in [w for w in self.marks if w[0] == run]:
            del self.marks[wid]
        claims = sorted(
            (self.rows[eid] for wid, eid in self.ledger.items() if wid[0] == run), key=Row.order
        )
        released = []
        for row in claims:
            eid = (row.source, row.id)
            assert row.holder is not None
            if row.holder[1] not in unanswered:
                self.shed(eid)
            elif row.targeted:
                self.kill(eid, TARGETED_REASON)
            else:
                del self.ledger[row.holder]
                row.state, row.holder, row.claimed_at = "live", None, None
                released.append(row.event())
        return Retired(len(mine), tuple(released))

    def park_wait(self, sub: Subscription, at: int) -> None:
        self.register(sub, at)
        self.marks[(sub.run, sub.effect)] = at

    def parked_waits(self, limit: int) -> list[Subscription]:
        if limit == 0:
            return []
        for wid in [w for w in self.marks if w[0] in self.seals]:
            self.waits.pop(wid, None)
            del self.marks[wid]
            for eid in [e for w, e in self.ledger.items() if w[0] == wid[0]]:
                self.shed(eid)
        listed = sorted((w for w in self.marks if w in self.waits), key=lambda w: b(*w))
        return [self.sub_of(w) for w in listed[:limit]]

    def erase_payload(self, source: str, id: str) -> bool:
        row = self.rows.get((source, id))
        if row is None:
            return False
        if row.erased:
            return True
        row.erased, row.payload = True, None
        if row.state == "live":
            self.kill((source, id), "erased")
        elif row.state == "held":
            assert row.holder is not None
            holder = row.holder
            self.kill((source, id), "erased")
            self.marks.pop(holder, None)
            for wid, w in self.waits.items():
                if (
                    wid[0] == holder[0]
                    and wid != holder
                    and wid in self.marks
                    and wid not in self.ledger
                    and any(k in row.keys for k in w.keys)
                ):
                    del self.marks[wid]
        return True

    def minter(self, source: str, id: str) -> Minter | None:
        row = self.rows.get((source, id))
        return None if row is None else Minter(row.by)

    def sweep_unclaimed(self, older_than: int, reason: str) -> int:
        due = [
            eid for eid, r in self.rows.items() if r.state == "live" and r.received_at <= older_than
        ]
        for eid in due:
            self.kill(eid, reason)
        return len(due)

    def dead_letters(self, limit: int) -> list[DeadLetter]:
        dead = sorted(
            (r for r in self.rows.values() if r.state == "dead"), key=Row.order, reverse=True
        )
        return [
            DeadLetter(r.event(), to_datetime(r.received_at), r.reason or "unclaimed")
            for r in dead[:limit]
        ]

    def waiting(self, limit: int) -> list[Subscription]:
        rows = sorted(
            (at, *b(*wid, *key), wid, key)
            for wid, w in self.waits.items()
            for key, at in w.keys.items()
        )
        return [self.sub_of(r[-2], r[-1]) for r in rows[:limit]]

    def purge(self, older_than: int, limit: int) -> int:
        gone = sorted(
            (
                r
                for r in self.rows.values()
                if r.state in ("dead", "consumed") and r.received_at <= older_than
            ),
            key=Row.order,
        )[:limit]
        for r in gone:
            del self.rows[(r.source, r.id)]
        return len(gone)

    def live(self, newest: bool) -> list[BufferedEvent]:
        """Every live row, oldest first (newest first with ``newest``)."""
        rows = sorted((r for r in self.rows.values() if r.state == "live"), key=Row.order)
        return [self.buffered((r.source, r.id)) for r in (rows[::-1] if newest else rows)]

    def oldest_live(self) -> Any:
        live = [r.received_at for r in self.rows.values() if r.state == "live"]
        return to_datetime(min(live)) if live else None

    def lookup_event(self, source: str, id: str) -> EventRecord | None:
        row = self.rows.get((source, id))
        if row is None:
            return None
        return EventRecord(
            row.event(),
            to_datetime(row.received_at),
            row.state,
            row.holder,
            None if row.claimed_at is None else to_datetime(row.claimed_at),
            (row.reason or "unclaimed") if row.state == "dead" else None,
            row.erased,
            row.targeted,
        )

    def wait_record(self, wid: Pair) -> WaitRecord:
        parked = self.marks.get(wid)
        return WaitRecord(
            self.sub_of(wid),
            None if parked is None else to_datetime(parked),
            self.ledger.get(wid),
        )

    def lookup_wait(self, run: str, effect: str) -> WaitRecord | None:
        wid = (run, effect)
        return self.wait_record(wid) if wid in self.waits else None

    def revive(self, source: str, id: str, at: int) -> Any:
        """Contract 11: a dead row live again at ``at``, then elected as ``deliver``."""
        row = self.rows.get((source, id))
        if row is None or row.state != "dead":
            return None
        row.state, row.reason, row.erased, row.targeted = "live", "", False, False
        row.received_at = at
        sub = self.elect(row, at)
        return Buffered() if sub is None else Resumed(sub)

    def stats(self) -> EventStats:
        count = dict.fromkeys(("live", "held", "consumed", "dead"), 0)
        for r in self.rows.values():
            count[r.state] += 1
        return EventStats(
            count["live"],
            len(self.ledger),
            count["consumed"],
            count["dead"],
            len(self.waits),
            len(self.marks),
        )

    # ---------------------------------------------------------------- runs

    def seal(self, run: str) -> bool:
        if run in self.seals:
            return False
        self.seals.add(run)
        return True

    def is_sealed(self, run: str) -> bool:
        return run in self.seals

    def lookup_run(self, run: str) -> RunRecord:
        """Contract 11, less sealed_at (the server's clock stamps a seal)."""
        waits = sorted((w for w in self.waits if w[0] == run), key=lambda w: b(w[1]))
        timers = sorted((t for t in self.timers if t[0] == run), key=lambda t: b(t[1]))
        return RunRecord(
            run,
            run in self.seals,
            tuple(self.wait_record(w) for w in waits),
            tuple(self.timer_record(t) for t in timers),
        )

    def close(self, run: str, unanswered: list[str]) -> Closed:
        newly = self.seal(run)
        return Closed(self.unsubscribe_run(run, unanswered), self.disarm_run(run), newly)

    # ---------------------------------------------------------------- timers

    def timer(self, tid: Pair) -> Timer:
        t = self.timers[tid]
        return Timer(tid[0], tid[1], to_datetime(t.fire_at), t.step, t.phase, t.case)

    def by_fire(self) -> list[Pair]:
        return sorted(self.timers, key=lambda tid: (self.timers[tid].fire_at, *b(*tid)))

    def arm(self, timer: Timer, fire_at: int) -> bool:
        tid = (timer.run, timer.effect)
        if tid in self.timers:
            return False
        self.timers[tid] = TimerRow(fire_at, timer.step, Phase(timer.phase), timer.case)
        return True

    def claim_due(self, now: int, limit: int, lease: int) -> list[Timer]:
        out: list[Timer] = []
        if limit == 0:
            return out
        for tid in self.by_fire():
            t = self.timers[tid]
            if t.fire_at > now or len(out) == limit:
                break
            if tid[0] in self.seals:
                del self.timers[tid]
            elif t.claimed_at is None or t.claimed_at + (t.lease or 0) <= now:
                t.claimed_at, t.lease = now, lease
                t.claims += 1
                out.append(self.timer(tid))
        return out

    def disarm(self, run: str, effect: str) -> bool:
        return self.timers.pop((run, effect), None) is not None

    def disarm_many(self, pairs: list[tuple[str, str]]) -> int:
        return sum(self.disarm(run, effect) for run, effect in dict.fromkeys(pairs))

    def disarm_run(self, run: str) -> int:
        mine = [tid for tid in self.timers if tid[0] == run]
        for tid in mine:
            del self.timers[tid]
        return len(mine)

    def pending_count(self) -> int:
        return len(self.timers)

    def pending(self, limit: int) -> list[Timer]:
        return [self.timer(tid) for tid in self.by_fire()[:limit]]

    def armed(self, run: str) -> list[Timer]:
        return [
            self.timer(tid)
            for tid in sorted(
                (tid for tid in self.timers if tid[0] == run), key=lambda tid: b(tid[1])
            )
        ]

    def timer_record(self, tid: Pair) -> TimerRecord:
        t = self.timers[tid]
        return TimerRecord(
            self.timer(tid),
            None if t.claimed_at is None else to_datetime(t.claimed_at),
            None if t.lease is None else timedelta(milliseconds=t.lease),
            t.claims,
        )

    def lookup_timer(self, run: str, effect: str) -> TimerRecord | None:
        return self.timer_record((run, effect)) if (run, effect) in self.timers else None

    def reschedule(self, run: str, effect: str, fire_at: int) -> bool:
        """Contract 11. Every lease the machine takes has lapsed by the server's
        clock, which judges reschedule, so an armed timer always moves; its claim
        stays, and claim_due judges that claim's lease at its own ``now`` (4.2)."""
        t = self.timers.get((run, effect))
        if t is None:
            return False
        t.fire_at = fire_at
        return True
