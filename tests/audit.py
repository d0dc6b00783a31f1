"""An auditor of a tenant's raw keys, and the load whose results it checks.

The auditor decodes rows and members itself (event rows, components, instants
as docs/keys.md describes them), independently of the library, and checks the
contract's invariants (2.6): every index entry points at a row in the state
that index is for, and every row sits in exactly the indexes its state
requires; the marks (the claim ledger) name held rows of their own wait; counts agree.

``load`` is one worker process: a seeded mix of operations over the whole
surface on a shared tenant, every acknowledged result appended to a log, and
every lost reply or dropped connection met by calling again, as the
reliability docs tell callers to do. ``check_log`` proves from the logs that no
event went to two waits, no wait got two events, no timer was handed out twice
inside a live lease, nothing acknowledged was lost, and no call answered as if
it had run before (every id the load stores or arms is new, so a `Duplicate`
or a `False` would be a lost reply answered wrongly).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from agentplane_redis import RedisStore, Resumed, Timer
from agentplane_redis.keys import Geometry

from helpers import ev, sub

PREFIX = "agentplane:{%s}:"
TERM = b" "


# ---------------------------------------------------------------- decoding


STATES = {b"L": b"live", b"H": b"held", b"C": b"consumed", b"D": b"dead"}
ROW = re.compile(rb"([LHCD])([e-])([t-]) (\d{16}) ((?:[^\x00-\x20]* )+)\n(.*)", re.S)


def event_fields(eid: bytes, raw: bytes) -> list[bytes]:
    """A stored event row as docs/keys.md describes it, in the fields' order there:
    state, source, id, kind, received_at (ms), minter actor and basis, holder run
    and effect, claimed_at (ms), reason, erased and targeted ("1"/"0"), keys, payload."""
    found = ROW.fullmatch(raw)
    assert found, f"not an event row: {raw!r}"
    letter, erased, targeted, received, body, payload = found.groups()
    parts = [uncomp(p) for p in body[:-1].split(b" ")]
    holder = parts[:3] if letter in b"HC" else [b"", b"", b""]
    rest = parts[3:] if letter in b"HC" else parts
    assert len(rest) >= 4 and len(rest) % 2 == 0, f"wrong number of fields: {raw!r}"
    source, id_ = (uncomp(p) for p in eid[:-1].split(b" "))
    ms = [b"%d" % (int(x) - 10**15) if x else b"" for x in (received, holder[2])]
    return [
        STATES[letter], source, id_, rest[0], ms[0], rest[1], rest[2], holder[0], holder[1],
        ms[1], rest[3], b"1" if erased == b"e" else b"0", b"1" if targeted == b"t" else b"0",
        *rest[4:], payload,
    ]  # fmt: skip


def comp(s: bytes) -> bytes:
    return re.sub(rb"[\x00-\x21]", lambda m: b"!" + bytes([m.group()[0] + 0x40]), s) + TERM


def uncomp(body: bytes) -> bytes:
    return re.sub(rb"!(.)", lambda m: bytes([m.group(1)[0] - 0x40]), body, flags=re.DOTALL)


def key_hash(base: bytes) -> int:
    """A key's hash as docs/keys.md gives it: each byte b in turn makes
    h = (h * 131 + b) mod 4294967291, from h = 0."""
    h = 0
    for b in base:
        h = (h * 131 + b) % 4294967291
    return h


def instant(ms: bytes | int) -> bytes:
    return b"%016d" % (int(ms) + 10**15)


class Audit:
    """Reads one tenant's raw keys and checks every invariant; raises AssertionError."""

    def __init__(self, client: redis.Redis, tenant: str) -> None:
        self.c, self.p = client, PREFIX % tenant

    def h(self, suffix: str) -> dict[bytes, bytes]:
        return self.c.hgetall(self.p + suffix)

    def z(self, suffix: str) -> set[bytes]:
        members = self.c.zrange(self.p + suffix, 0, -1, withscores=True)
        assert all(score == 0 for _, score in members), suffix
        return {m for m, _ in members}

    def run(self) -> dict[str, int]:
        events = self.h("event")
        # A mark is "parked_at" or "parked_at eid": the held rows are the ledger.
        marks = self.h("mark")
        for value in marks.values():
            assert re.fullmatch(rb"-?\d+( .+)?", value, re.S), f"mark {value!r}"
        ledger = {wid: v.split(b" ", 1)[1] for wid, v in marks.items() if b" " in v}
        want: dict[str, set[bytes]] = defaultdict(set)
        counts: dict[str, int] = defaultdict(int)
        stored = self.c.hget(self.p + "buckets", "key")
        key_geometry = Geometry.parse(stored) if stored else Geometry()
        by_bucket: dict[bytes, set[bytes]] = defaultdict(set)
        for eid, raw in events.items():
            f = event_fields(eid, raw)
            state, source, id_, kind, received = f[0], f[1], f[2], f[3], f[4]
            assert eid == comp(source) + comp(id_), "row under a field not its identity"
            counts[state.decode()] += 1
            at = instant(received)
            erased, claimed = f[11] == b"1", bool(f[7] or f[8] or f[9])
            keys = [comp(f[i]) + comp(f[i + 1]) for i in range(13, len(f) - 1, 2)]
            if state == b"live":
                assert not claimed and not erased and f[12] == b"0", raw
                want["event:live"].add(at + eid)
                for nv in keys:
                    h = key_hash(comp(kind) + nv)
                    bucket = b"event:key:%d" % key_geometry.bucket_of(h)
                    by_bucket[bucket].add(b"%08x " % h + comp(source) + at + comp(id_))
            elif state == b"held":
                assert f[7] and f[8] and f[9] and not erased, raw
                wid = comp(f[7]) + comp(f[8])
                assert ledger.get(wid) == eid, f"held row without its ledger entry: {raw!r}"
            elif state == b"consumed":
                assert f[7] and f[8] and f[9], raw
                want["event:consumed"].add(at + eid)
            elif state == b"dead":
                assert not claimed, raw
                want["event:dead"].add(at + eid)
            else:
                raise AssertionError(f"unknown state {state!r}")
            has_payload = f[-1] != b""
            assert has_payload == (state != b"consumed" and not erased), f"payload of {raw!r}"
        for wid, eid in ledger.items():
            assert eid in events, "a mark names a row that does not exist"
            f = event_fields(eid, events[eid])
            assert f[0] == b"held" and comp(f[7]) + comp(f[8]) == wid, "a mark names another's row"
        self.live_order(want["event:live"])
        assert self.z("event:consumed") == want["event:consumed"], "event:consumed disagrees"
        assert self.z("event:dead") == want["event:dead"], "event:dead disagrees with the rows"
        self.waits(key_geometry, by_bucket)
        found = {k: self.z(k.decode()) for k in self.key_buckets()}
        past = [k for k in found if int(k.rsplit(b":", 1)[1]) >= key_geometry.count]
        assert not past, f"key buckets past the count: {past!r}"
        assert {k: v for k, v in found.items() if v} == dict(by_bucket), (
            "the key buckets disagree with the live rows and the unparked waits"
        )
        self.timers()
        return dict(counts)

    def live_order(self, live: set[bytes]) -> None:
        """The live order: its time buckets hold the live rows, and the live count
        counts them."""
        count = self.c.hget(self.p + "event:live", b"")
        assert int(count or 0) == len(live), "the live count is not the live rows"
        self.time_order("event:live", "live", live)

    def time_order(self, suffix: str, field: str, want: set[bytes]) -> None:
        """A family of time buckets (docs/keys.md, "Time buckets"): they hold the
        members of ``want`` (instant . member) and the members listed as having
        left them, each in the bucket of its instant; the index lists exactly the
        buckets, the geometry field names the newest and its end, and the counts
        agree."""
        live = want
        counts = self.h(suffix)
        counts.pop(b"", None)
        sentinel = counts.pop(b"~", None)
        left = {k[1:]: v for k, v in counts.items() if k[:1] == b"g"}
        entries = {k: int(v) for k, v in counts.items() if k[:1] != b"g"}
        index = self.z(suffix + ":index")
        marks = {m for m in index if m[:1] == b"~"}
        starts = sorted(index - marks)
        # The sentinels that keep the index and the counts out of listpacks
        assert marks == ({sentinel} if sentinel else set()), (marks, sentinel)
        assert sentinel is None or len(sentinel) > 64, sentinel
        assert all(re.fullmatch(rb"\d{16}", s) for s in starts), starts
        assert set(entries) == set(starts), "live bucket counts for buckets not indexed"
        assert set(left) <= set(starts), "a left list of a bucket not indexed"
        stored = self.c.hget(self.p + "buckets", field) or b"10"
        assert re.fullmatch(rb"\d{1,2}( \d{16} \d{16})?", stored), stored
        newest = stored.split(b" ")[1:]
        assert (newest[0] if newest else None) == (starts[-1] if starts else None), "not the newest"
        found = {k.rsplit(b":", 1)[1] for k in self.c.scan_iter(self.p + suffix + ":*")}
        assert found - {b"index"} == set(starts), "buckets not indexed, or indexed and missing"
        seen: set[bytes] = set()
        for i, start in enumerate(starts):
            scored = self.scored(suffix + ":" + start.decode())
            assert len(scored) == entries[start], f"bucket {start!r}: wrong count"
            end = int(starts[i + 1]) if i + 1 < len(starts) else int(newest[1])
            members = {}
            for eid, score in scored.items():
                assert score >= 0 and score == int(score), f"{eid!r} scored {score}"
                at = int(start) + int(score)
                assert end is None or at < end, f"{eid!r} out of its bucket"
                members[b"%016d" % at + eid] = eid
            gone = left.get(start, b"")
            assert gone == b"" or gone.endswith(b"\n"), gone
            listed = set(gone.split(b"\n")[:-1]) if gone else set()
            assert len(listed) == gone.count(b"\n"), "a left list names a row twice"
            assert listed <= set(scored), "a left list names a row not in its bucket"
            # A list is tidied before it reaches TIME.TIDY (16) or every entry.
            assert len(listed) < 16, f"bucket {start!r}: a left list past its tidying"
            assert len(listed) < len(scored), f"bucket {start!r}: holds only what left"
            kept = {m for m, eid in members.items() if eid not in listed}
            assert not {m for m, eid in members.items() if eid in listed} & live, (
                "a left list names a live row"
            )
            seen |= kept
        assert seen == live, f"the buckets of {suffix} disagree with the rows"

    def waits(self, key_geometry: Geometry, by_bucket: dict[bytes, set[bytes]]) -> None:
        """Checks the waits; adds the election entries the key buckets must hold
        (one per key row of an unparked wait of an unsealed run) to by_bucket."""
        marks, seals = self.h("mark"), self.h("seal")
        stored = self.c.hget(self.p + "buckets", "wait")
        geometry = Geometry.parse(stored) if stored else Geometry()
        keys = self.c.scan_iter(
            match=self.p.replace("{", "[{]").replace("}", "[}]") + "wait:[0-9]*"
        )
        rows = {k: self.c.hgetall(k) for k in keys}
        past = [k for k in rows if int(k.rsplit(b":", 1)[1]) >= geometry.count]
        assert not past, f"wait buckets past the count: {past!r}"
        want_order = set()
        attrs_of: dict[bytes, bytes] = {}
        for key, bucket in rows.items():
            for wid, row in bucket.items():
                ids = wid.split(TERM)
                assert len(ids) == 3 and not ids[2], f"bad wait id {wid!r}"
                run = uncomp(ids[0])
                assert key == self.p.encode() + b"wait:%d" % geometry.bucket(run.decode()), (
                    "wait in another bucket"
                )
                # kind, step and phase, case, from_source; then namespace, value and
                # created_at of each key row, in byte order of the keys
                parts = row.split(TERM)
                kind, stepph, _case, source = parts[:4]
                assert kind and re.fullmatch(rb"\d{1,10}[fc]", stepph), row
                attrs = TERM.join(parts[:4]) + TERM
                attrs_of[wid] = attrs
                rest = row[len(attrs) :]
                nvs, ats = [], set()
                while rest:
                    ns, value, tail = rest.split(TERM, 2)
                    at, rest = tail[:16], tail[16:]
                    assert re.fullmatch(rb"\d{16}", at), row
                    nv = ns + TERM + value + TERM
                    nvs.append(nv)
                    ats.add(at)
                    if wid not in marks and run not in seals:
                        h = key_hash(kind + TERM + nv)
                        bucket_key = b"event:key:%d" % key_geometry.bucket_of(h)
                        by_bucket[bucket_key].add(b"%08x~" % h + source + TERM + at + wid)
                assert nvs and nvs == sorted(set(nvs)), f"a wait's keys out of order: {row!r}"
                # one order member per instant: the wait's id for the earliest
                first, *later = sorted(ats)
                want_order.add(first + wid)
                want_order.update(at + wid + at for at in later)
        count = self.c.get(self.p + "wait:count")
        assert int(count or 0) == len(attrs_of), "wait:count is not the registered waits"
        self.time_order("wait:order", "order", want_order)
        index = self.z("mark:index")
        assert {m[1:] for m in index} == set(marks), "mark:index disagrees with the marks"
        assert len(index) == len(marks), "a mark in two classes"

    def scored(self, suffix: str) -> dict[bytes, float]:
        return dict(self.c.zrange(self.p + suffix, 0, -1, withscores=True))

    def key_buckets(self) -> list[bytes]:
        """The key buckets' names without the tenant's prefix (``event:key:<n>``)."""
        keys = self.c.scan_iter(
            match=self.p.replace("{", "[{]").replace("}", "[}]") + "event:key:[0-9]*"
        )
        return [k[len(self.p) :] for k in keys]

    def buckets(self) -> dict[bytes, dict[bytes, bytes]]:
        """Each timer bucket's rows, by bucket key."""
        keys = self.c.scan_iter(
            match=self.p.replace("{", "[{]").replace("}", "[}]") + "timer:[0-9]*"
        )
        return {k: self.c.hgetall(k) for k in keys}

    def timers(self) -> None:
        walk, held, held_fire = (
            self.scored("timer:walk"),
            self.scored("timer:held"),
            self.scored("timer:held:fire"),
        )
        claims = self.h("timer:claim")
        seen = set()
        stored = self.c.hget(self.p + "buckets", "timer")
        geometry = Geometry.parse(stored) if stored else Geometry()
        buckets = self.buckets()
        past = [k for k in buckets if int(k.rsplit(b":", 1)[1]) >= geometry.count]
        assert not past, f"buckets past the count: {past!r}"
        for key, rows in buckets.items():
            for tid, attrs in rows.items():
                parts = tid.split(TERM)
                assert len(parts) == 3 and not parts[2], f"bad timer id {tid!r}"
                run = uncomp(parts[0]).decode()
                assert key == self.p.encode() + b"timer:%d" % geometry.bucket(run), (
                    "timer in another bucket"
                )
                member = tid + attrs
                assert re.fullmatch(rb"\d+[fc].*", attrs, re.DOTALL), attrs
                in_walk, in_held = member in walk, member in held
                assert in_walk != in_held, (
                    f"timer in {'both' if in_walk else 'neither'}: {member!r}"
                )
                assert in_held == (member in held_fire), (
                    f"held timer without its fire_at: {member!r}"
                )
                if tid in claims:
                    assert re.fullmatch(rb"-?\d+ [1-9]\d* [1-9]\d*", claims[tid]), claims[tid]
                if in_held:
                    at, lease, _count = claims[tid].split(b" ")
                    assert held[member] == int(at) + int(lease), (
                        f"held until another time: {member!r}"
                    )
                seen.add(member)
        assert set(walk) | set(held) == seen, "timer:walk or timer:held names a timer that is gone"
        assert set(claims) <= {m[: m.index(TERM, m.index(TERM) + 1) + 1] for m in seen}, (
            "a claim without its timer"
        )


# ---------------------------------------------------------------- the load


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=5, retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), 8)
    )


def persist(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Calls until an answer comes: after OutcomeUnknown (a ConnectionError) the same
    call again resumes the lost one; a down or loading server is waited for."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return call(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def load(url: str, tenant: str, name: str, ops: int, seed: int, log: str, start: Any) -> None:
    """One worker: a seeded mix over the surface; every acknowledged result logged."""
    rng = random.Random(seed)
    store = persist(RedisStore, client(url), tenant=tenant)
    e, t, r, rn = store.events, store.timers, store.runs, f"{name}-run"
    out = Path(log).open("a")
    mine: list[str] = []
    waits: list[tuple[str, str, str]] = []
    holding: list[tuple[str, str]] = []
    start.wait()

    def note(**entry: Any) -> None:
        out.write(json.dumps({"w": name, **entry}) + "\n")
        out.flush()

    for n in range(ops):
        key = f"k/{rng.randrange(6)}"
        roll = rng.random()
        if roll < 0.25:
            event = ev(f"{name}-e{n}", key)
            outcome = persist(e.deliver, event)
            won = (
                [outcome.subscription.run, outcome.subscription.effect]
                if isinstance(outcome, Resumed)
                else None
            )
            note(op="deliver", event=event.id, outcome=type(outcome).__name__, wait=won)
            mine.append(event.id)
        elif roll < 0.45:
            w = sub(f"{rn}{n}", "w", key)
            got = persist(e.wait, w)
            note(op="wait", wait=[w.run, w.effect], event=got.event.id if got else None)
            (holding if got else waits).append((w.run, w.effect) if got else (w.run, w.effect, key))
        elif roll < 0.5 and waits:
            run, effect, k = waits.pop(rng.randrange(len(waits)))
            got = persist(e.claim_for, sub(run, effect, k))
            note(op="claim_for", wait=[run, effect], event=got.event.id if got else None)
            if got:
                holding.append((run, effect))
            else:
                waits.append((run, effect, k))
        elif roll < 0.58 and holding:
            run, effect = holding.pop(rng.randrange(len(holding)))
            persist(e.unsubscribe, run, effect)  # the payload is journaled by now
            note(op="unsubscribe", wait=[run, effect])
        elif roll < 0.72:
            fire = datetime.now(timezone.utc) + timedelta(milliseconds=rng.randrange(-500, 1500))
            new = persist(t.arm, Timer(f"{rn}{n}", "t", fire))
            note(op="arm", timer=[f"{rn}{n}", "t"], new=new)
        elif roll < 0.86:
            lease = 3000
            begun = time.time()
            got = persist(t.claim_due, limit=4, lease=timedelta(milliseconds=lease))
            note(
                op="claim_due",
                timers=[[x.run, x.effect] for x in got],
                start=begun,
                end=time.time(),
                lease=lease,
            )
            for x in got[: len(got) // 2]:
                note(
                    op="disarm", timer=[x.run, x.effect], existed=persist(t.disarm, x.run, x.effect)
                )
        elif roll < 0.9 and holding:
            run, _ = holding.pop(rng.randrange(len(holding)))
            closed = persist(r.close, run)
            note(op="close", run=run, released=len(closed.retired.released))
        elif roll < 0.93:
            done = persist(e.sweep_unclaimed, datetime.now(timezone.utc) - timedelta(seconds=2))
            note(op="sweep", retired=done)
        elif roll < 0.96 and mine:
            victim = mine[rng.randrange(len(mine))]
            note(op="erase", event=victim, existed=persist(e.erase_payload, "src", victim))
        else:
            persist(e.parked_waits, 10)
            persist(e.stats)
    out.close()


def check_log(lines: list[dict[str, Any]], client: redis.Redis, tenant: str) -> dict[str, int]:
    """What the logs prove, against the final state."""
    p = PREFIX % tenant
    events_of_wait: dict[tuple[str, str], set[str]] = defaultdict(set)
    waits_of_event: dict[str, set[tuple[str, str]]] = defaultdict(set)
    stored, armed, gone = set(), set(), set()
    claims: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    closed, erased = set(), set()
    for x in lines:
        if x["op"] == "deliver":
            # Every id is new: Duplicate would be a lost reply answered wrongly.
            assert x["outcome"] in ("Buffered", "Resumed"), f"a new event answered {x}"
            stored.add(x["event"])
            if x["wait"]:
                events_of_wait[tuple(x["wait"])].add(x["event"])
                waits_of_event[x["event"]].add(tuple(x["wait"]))
        elif x["op"] in ("wait", "claim_for") and x["event"]:
            events_of_wait[tuple(x["wait"])].add(x["event"])
            waits_of_event[x["event"]].add(tuple(x["wait"]))
        elif x["op"] == "arm":
            assert x["new"], f"a new timer answered False: {x}"
            armed.add(tuple(x["timer"]))
        elif x["op"] == "disarm" and x["existed"]:
            gone.add(tuple(x["timer"]))
        elif x["op"] == "erase" and x["existed"]:
            erased.add(x["event"])
        elif x["op"] == "close":
            closed.add(x["run"])
        elif x["op"] == "claim_due":
            for tm in x["timers"]:
                claims[tuple(tm)].append((x["start"], x["end"], x["lease"]))
    for wait, evs in events_of_wait.items():
        # Erasing the event a wait holds makes the wait matchable again (contract 3.13).
        assert len(evs - erased) <= 1, f"wait {wait} was given {sorted(evs)}"
    for event, ws in waits_of_event.items():
        assert len(ws) == 1, f"event {event} went to {sorted(ws)}"
    rows = client.hkeys(p + "event")
    present = {event_fields(k, client.hget(p + "event", k))[2].decode() for k in rows}
    lost = stored - present
    assert not lost, f"acknowledged events lost: {sorted(lost)[:5]}"
    bucketed = Audit(client, tenant).buckets().values()
    timers = {
        tuple(uncomp(x).decode() for x in k.split(TERM)[:2]) for rows in bucketed for k in rows
    }
    missing = {tm for tm in armed - gone if tm[0] not in closed} - timers
    assert not missing, f"acknowledged timers lost: {sorted(missing)[:5]}"
    for tm, spans in claims.items():
        spans.sort()
        for (s1, _e1, lease), (_s2, e2, _l2) in itertools.pairwise(spans):
            # The second claim ended before the first could have begun plus its lease.
            assert e2 >= s1 + lease / 1000 - 0.05, f"timer {tm} handed out twice in a lease"
    return {
        "acknowledged events": len(stored),
        "pairings": len(events_of_wait),
        "timers armed": len(armed),
        "timer claims": sum(len(v) for v in claims.values()),
    }
