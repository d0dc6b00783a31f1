"""Every operation as a plan: validate, build script calls, parse replies (pure).

An operation is a generator that yields ``Call``s and receives each reply; its
return value is the method's result. The sync and async stores only drive
plans (``store.py``), so the logic, the multi-step loops included, exists once.
Validation runs before the first call is yielded: refused input never reaches
Redis, and no clock is read for it.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, Literal, TypeAlias, TypeVar

from . import codec
from .codec import text
from .errors import CorruptRow, InvalidInput
from .keys import (
    BUCKETED,
    Geometry,
    TenantKeys,
    component,
    key_hash,
    split_components,
    timer_attrs,
    tuple_member,
    validate_tenant,
)
from .model import (
    Buffered,
    BufferedEvent,
    Closed,
    DeadLetter,
    DeliverOutcome,
    Duplicate,
    EventRecord,
    EventStats,
    InboundEvent,
    Matched,
    Minter,
    NotWaiting,
    Resumed,
    Retired,
    RunRecord,
    Subscription,
    TargetedOutcome,
    Timer,
    TimerRecord,
    TimerStats,
    WaitRecord,
)
from .scripts import catalogue

T = TypeVar("T")
Arg: TypeAlias = "str | int | bytes"
Plan: TypeAlias = Generator["Call", Any, T]
Clock: TypeAlias = Literal["server", "client"]

# Step sizes, chosen so that a step stays within the contract's server-time
# target (p99 <= 0.5 ms at typical rows); measured by benchmarks/server_time.py.
#: Rows one step of sweep_unclaimed or purge handles at most.
SWEEP_BATCH = 3
PURGE_BATCH = 16
#: Sealed marks one parked_waits step retires, and waits it lists, at most.
PARKED_BATCH = 8
LIST_BATCH = 16
#: Timers one disarm_many step deletes, at most (a step of about 0.3 ms at 10,000 timers).
DISARM_BATCH = 32
#: Lapsed leases one claim_due step restores, and ready timers it examines, at most.
TIMER_SCAN = 16
DEFAULT_TIMER_LEASE_MS = 60_000
#: Calls of one step a store makes while the buckets keep splitting under it.
_REGROWN_TRIES = 16


@dataclass(frozen=True, slots=True)
class TimeFamily:
    """A family of time buckets (``docs/keys.md``, "Time buckets"): the key suffix
    of its buckets, the letters of its ``NEED`` items (a bucket's start, the span),
    and the scripts that place or take its members in the common case, so name
    the buckets of the present (``Context.time_now``) at once (their first
    argument is the call's instant)."""

    suffix: str
    letter: str
    span_letter: str
    placed: frozenset[str]


#: The live order (events by received_at) and the waits' registration order
#: (key rows by created_at).
TIME_FAMILIES = (
    TimeFamily(
        "event:live",
        "L",
        "J",
        frozenset({"buffer", "deliver", "claim_for", "wait", "match_waiter", "revive"}),
    ),
    TimeFamily("wait:order", "O", "Q", frozenset({"subscribe", "wait", "park_wait"})),
)
WAIT_ORDER = TIME_FAMILIES[1]
#: A new tenant's span exponent: its time buckets open a second apart
#: (``TIME.ABSENT`` in ``lua/_lib/buckets.lua``) until the rate says otherwise.
TIME_SPAN = 10
#: Time bucket starts a store remembers per family (``Context.learn_time``), at most.
_TIME_STARTS = 256
#: Runs whose waits' keys a store remembers (``Context.remember_wait``), at most.
_REMEMBERED_RUNS = 4096
DEFAULT_MAX_PAYLOAD = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Context:
    """What every plan needs to know about its store."""

    keys: TenantKeys
    clock: Clock = "server"
    timer_lease_ms: int = DEFAULT_TIMER_LEASE_MS
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD
    max_correlation_keys: int = codec.DEFAULT_MAX_KEYS

    #: Each script's keys and whether it writes, once looked up.
    _scripts: dict[str, tuple[tuple[str, ...], bool, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: The timer buckets' geometry as the server last gave it.
    _geometry: list[Geometry] = field(
        default_factory=lambda: [Geometry()], init=False, repr=False, compare=False
    )

    #: The key buckets' geometry as the server last gave it (a ``NEED`` reply).
    _key_geometry: list[Geometry] = field(
        default_factory=lambda: [Geometry()], init=False, repr=False, compare=False
    )
    #: The wait buckets' geometry as the server last gave it (a ``NEED`` reply).
    _wait_geometry: list[Geometry] = field(
        default_factory=lambda: [Geometry()], init=False, repr=False, compare=False
    )
    #: The kind and keys of the waits this store registered, by run and effect, so
    #: that retiring one names its key buckets at once, and the registration
    #: order's buckets of its registration instants, so that it leaves them at
    #: once (a hint: a wait registered elsewhere, or with keys added elsewhere,
    #: costs a ``NEED`` and a call more, or a place on a bucket's left list).
    _waits: OrderedDict[str, dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )
    #: The run of the wait this store registered last under each (kind, namespace,
    #: value), so that a delivery names its wait bucket at once (a hint: an
    #: election won by a wait registered elsewhere costs a read of the election
    #: first, or a ``NEED`` and a call more: ``_heads``).
    _key_runs: OrderedDict[tuple[str, str, str], str] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )
    #: Whether a delivery that knows no likely winner reads the election's heads
    #: first (``election_heads``), and how many ``NEED`` replies have named wait
    #: buckets: the read costs a call where nobody waits, and saves the ``NEED``
    #: and its call where somebody registered elsewhere does, so a delivery reads
    #: the heads while the last such delivery found a wait (``heads_met``).
    _heads: list[int] = field(default_factory=lambda: [0, 0], init=False, repr=False, compare=False)

    #: Per time bucket family (its suffix): the span exponent as the server last
    #: gave it (a ``NEED`` reply), and the starts of buckets the server named, sorted
    #: (a hint, so that a member of an instant before the newest bucket names its
    #: bucket at once).
    _times: dict[str, tuple[list[int], list[int]]] = field(
        default_factory=lambda: {f.suffix: ([TIME_SPAN], []) for f in TIME_FAMILIES},
        init=False,
        repr=False,
        compare=False,
    )

    @property
    def geometry(self) -> Geometry:
        return self._geometry[0]

    @property
    def key_geometry(self) -> Geometry:
        return self._key_geometry[0]

    @property
    def wait_geometry(self) -> Geometry:
        return self._wait_geometry[0]

    @property
    def wait_needs(self) -> int:
        """How many ``NEED`` replies have named wait buckets."""
        return self._heads[1]

    def time_now(self, family: TimeFamily, at: Arg = "") -> list[str]:
        """The bucket of ``family`` a member of instant ``at`` (ms, a script's
        argument; "" for now, by the local clock) opens or joins, by the span last
        learned, and the bucket beside it nearer to that instant (a server's clock
        a little ahead or behind), and the bucket last seen holding it."""
        spans, known = self._times[family.suffix]
        span = 1 << spans[0]
        now = (int(at) if at != "" else time.time_ns() // 1_000_000) + 10**15
        start = now - now % span
        other = start + span if 2 * (now - start) >= span else start - span
        starts = [start, other]
        i = bisect.bisect_right(known, now)
        if i and known[i - 1] not in starts:
            starts.append(known[i - 1])
        return [self.keys.time_bucket(family.suffix, f"{n:016d}") for n in starts]

    def learn_time(self, family: TimeFamily, start: int) -> None:
        """Notes the start of a bucket of ``family`` the server named."""
        known = self._times[family.suffix][1]
        i = bisect.bisect_left(known, start)
        if i == len(known) or known[i] != start:
            known.insert(i, start)
            if len(known) > _TIME_STARTS:
                del known[0]

    def remember_wait(
        self, run: str, effect: str, kind: str, pairs: Sequence[str], at: Arg
    ) -> None:
        """Notes a wait this store registered (its keys: namespace, value, ...) at
        ``at`` (the call's instant argument)."""
        effects = self._waits.pop(run, None) or {}
        known = effects.get(effect)
        order = self.time_now(WAIT_ORDER, at)
        if known is None:
            effects[effect] = (kind, tuple(pairs), tuple(order))
        else:
            more = tuple(k for k in order if k not in known[2])
            effects[effect] = (known[0], (*known[1], *pairs), known[2] + more)
        self._waits[run] = effects
        while len(self._waits) > _REMEMBERED_RUNS:
            self._waits.popitem(last=False)
        for i in range(0, len(pairs), 2):
            key = (kind, pairs[i], pairs[i + 1])
            self._key_runs.pop(key, None)
            self._key_runs[key] = run
        while len(self._key_runs) > _REMEMBERED_RUNS:
            self._key_runs.popitem(last=False)

    def likely_runs(self, kind: str, pairs: Sequence[str]) -> list[str]:
        """The runs of the waits this store registered last under the event's keys
        (namespace, value, ...) of its kind: likely winners of its election."""
        found = (
            self._key_runs.get((kind, pairs[i], pairs[i + 1])) for i in range(0, len(pairs), 2)
        )
        return [run for run in found if run is not None]

    def learn_key_geometry(self, learned: Geometry) -> None:
        """Takes the key buckets' geometry the server answered."""
        self._key_geometry[0] = learned

    def reads_heads(self) -> bool:
        """Whether a delivery that knows no likely winner reads the election first."""
        return bool(self._heads[0])

    def heads_met(self, read: bool, runs: Sequence[str], needs: int) -> None:
        """After a delivery that knew no likely winner: whether the next one reads
        the election first. It does while a read found a wait, or a delivery that
        did not read was answered ``NEED`` for a wait bucket (``needs``: the count
        before it)."""
        self._heads[0] = int(bool(runs) if read else self._heads[1] > needs)

    def remembered_waits(
        self, run: str, effect: str | None = None
    ) -> tuple[list[tuple[str, tuple[str, ...]]], tuple[str, ...]]:
        """The kind and keys of the run's waits this store registered (of one effect,
        or all), and the registration order's buckets that likely hold their key
        rows; forgotten: they are being retired."""
        effects = self._waits.get(run)
        if not effects:
            return [], ()
        if effect is None:
            del self._waits[run]
            known = list(effects.values())
        else:
            one = effects.pop(effect, None)
            known = [] if one is None else [one]
        order = tuple(dict.fromkeys(k for _, _, buckets in known for k in buckets))
        return [(kind, pairs) for kind, pairs, _ in known], order

    def keyed(
        self,
        script: str,
        args: Sequence[Arg] | Callable[[Geometry], tuple[Sequence[Arg], Sequence[str]]],
        kind: str = "",
        pairs: Sequence[str] = (),
        *,
        split: bool = False,
        run: str | None = None,
        also: Sequence[tuple[str, Sequence[str]]] = (),
        waits: Sequence[str] = (),
        registers: bool = False,
        hinted: Sequence[str] = (),
    ) -> Plan[Any]:
        """One call of a script with key buckets: those of ``kind``'s keys (``pairs``:
        namespace, value, ...) and of ``also``'s (kind, pairs), the two the next
        split writes when ``split``, the time buckets of the call's instant for
        the scripts that place their members (``TIME_FAMILIES``), and whatever
        buckets the server answers ``NEED`` for (the buckets of keys of rows the
        call is to touch, of a geometry that grew since this store last learned
        it, or time buckets), which it does before writing anything. A script
        with a timer bucket gets the bucket of ``run``, and is called again after
        ``BUCKETS``; its ``args`` may depend on the timer
        buckets' geometry: then it gives the arguments and the further keys for it,
        which go first. The wait buckets of ``waits`` (runs) are named too, and
        the two the next split of the wait buckets writes when the call
        ``registers`` a wait, and the time buckets ``hinted``."""
        needed: set[int] = set()
        needed_waits: set[int] = set()
        times: list[str] = []
        for _ in range(_REGROWN_TRIES):
            g = self.key_geometry
            wg = self.wait_geometry
            call_args, more = args(self.geometry) if callable(args) else (args, ())
            numbers = {
                g.bucket_of(key_hash(k, p[i], p[i + 1]))
                for k, p in ((kind, pairs), *also)
                for i in range(0, len(p), 2)
            }
            more = [*more, *(self.keys.key_bucket(n) for n in sorted(numbers | needed))]
            if split:
                more += [k for k in self.keys.key_split(g) if k not in more]
            wanted = {wg.bucket(r) for r in waits} | needed_waits
            more += [self.keys.wait_bucket(n) for n in sorted(wanted)]
            if registers:
                more += [k for k in self.keys.wait_split(wg) if k not in more]
            for family in TIME_FAMILIES:
                if script in family.placed:
                    more += [k for k in self.time_now(family, call_args[0]) if k not in times]
            more += [k for k in dict.fromkeys((*hinted, *times)) if k not in more]
            reply = yield self.call(script, call_args, run=run, more=more)
            status = text(reply[0])
            if status == "BUCKETS":
                self.learn(reply[1:])
            elif status == "NEED":
                learned = Geometry.parse(text(reply[1]))
                if learned != g:
                    self._key_geometry[0], needed = learned, set()
                items = [text(n) for n in reply[2:]]
                for item in items:  # the wait geometry ("V"), which the "W" items follow
                    if item[:1] == "V" and Geometry.parse(item[1:]) != wg:
                        self._wait_geometry[0], needed_waits = Geometry.parse(item[1:]), set()
                for item in items:
                    if item[:1].isdigit():
                        needed.add(int(item))
                    elif item[:1] == "W":
                        needed_waits.add(int(item[1:]))
                        self._heads[1] += 1
                    for family in TIME_FAMILIES:
                        if item[:1] == family.letter:
                            times.append(self.keys.time_bucket(family.suffix, item[1:]))
                            self.learn_time(family, int(item[1:]))
                        elif item[:1] == family.span_letter:
                            self._times[family.suffix][0][0] = int(item[1:])
            else:
                return reply
        raise CorruptRow("buckets", f"{script}: they changed under each of {_REGROWN_TRIES} calls")

    def learn(self, geometry: Sequence[Any]) -> None:
        """Takes the geometry a reply names after its status (``BUCKETS``, or the
        ``NEW`` of an arming that split a bucket)."""
        self._geometry[0] = Geometry.parse(" ".join(text(word) for word in geometry))

    def bucketed(
        self,
        script: str,
        args: Sequence[Arg] | Callable[[Geometry], tuple[Sequence[Arg], Sequence[str]]],
        run: str,
    ) -> Plan[Any]:
        """One call of a script with a timer bucket key (the bucket of ``run``) and no
        key buckets, called again after ``BUCKETS``. (No timer script answers
        ``NEED``: ``keyed``'s naming of key, wait and time buckets is not needed.)"""
        for _ in range(_REGROWN_TRIES):
            call_args, more = args(self.geometry) if callable(args) else (args, ())
            reply = yield self.call(script, call_args, run=run, more=more)
            if text(reply[0]) != "BUCKETS":
                return reply
            self.learn(reply[1:])
        raise CorruptRow("buckets", f"{script}: they changed under each of {_REGROWN_TRIES} calls")

    def call(
        self, script: str, args: Sequence[Arg], run: str | None = None, more: Sequence[str] = ()
    ) -> Call:
        """One script call (a writing script's carries a call token, which the driver
        gives it: ``drivers._Lanes``). A
        script with a bucketed key gets the bucket of ``run`` there, and ``more``
        keys after its own."""
        known = self._scripts.get(script)
        if known is None:
            roles = catalogue()[script].roles
            bucketed = next((i for i, r in enumerate(roles) if r in BUCKETED), -1)
            known = (script_keys(self.keys, script), catalogue()[script].writes, bucketed)
            self._scripts[script] = known
        keys, writes, bucketed = known
        if bucketed >= 0:
            # The bucket key, then the geometry it was computed with as the last
            # argument (before the token), which the script checks.
            g = self.geometry
            bucket = self.keys.timer_bucket(run or "", g)
            keys = (*keys[:bucketed], bucket, *keys[bucketed + 1 :])
            args = (*args, g.text())
        return Call(script, (*keys, *more), tuple(args), writes)

    def at(self, name: str, value: datetime | None) -> str:
        """The instant argument of a script: the caller's, the local clock, or ""
        for the server's (read inside the script)."""
        if value is not None:
            return str(codec.instant(name, value))
        if self.clock == "client":
            return str(codec.instant(name, datetime.now(timezone.utc)))
        return ""


def script_keys(keys: TenantKeys, script: str) -> tuple[str, ...]:
    """The KEYS of one script for one tenant, in its header's order."""
    return tuple(keys.for_roles(catalogue()[script].roles))


def bucket_index(script: str) -> int:
    """The KEYS index (1-based, as the script reads it) of a script's bucket key."""
    roles = catalogue()[script].roles
    return next(i for i, r in enumerate(roles, 1) if r in BUCKETED)


@dataclass(frozen=True, slots=True)
class Call:
    """One script call: which script, its keys, its arguments, and whether it
    writes: a writing call is sent with a call token (``drivers._Lanes``), and
    re-sending it with its token answers what its first execution did."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Arg, ...]
    writes: bool


def make_context(
    tenant: str,
    clock: object = "server",
    timer_lease: object = None,
    max_payload_bytes: object = DEFAULT_MAX_PAYLOAD,
    max_correlation_keys: object = codec.DEFAULT_MAX_KEYS,
) -> Context:
    """A validated context for a store's constructor options."""
    name = validate_tenant(tenant)
    if clock not in ("server", "client"):
        raise InvalidInput('clock must be "server" or "client"')
    lease = (
        DEFAULT_TIMER_LEASE_MS
        if timer_lease is None
        else codec.duration_ms("timer_lease", timer_lease)
    )
    if (
        isinstance(max_payload_bytes, bool)
        or not isinstance(max_payload_bytes, int)
        or not 1 <= max_payload_bytes <= codec.MAX_PAYLOAD_LIMIT
    ):
        raise InvalidInput(f"max_payload_bytes must be an int from 1 to {codec.MAX_PAYLOAD_LIMIT}")
    if (
        isinstance(max_correlation_keys, bool)
        or not isinstance(max_correlation_keys, int)
        or not 1 <= max_correlation_keys <= codec.MAX_KEYS_LIMIT
    ):
        raise InvalidInput(f"max_correlation_keys must be an int from 1 to {codec.MAX_KEYS_LIMIT}")
    return Context(TenantKeys(name), clock, lease, max_payload_bytes, max_correlation_keys)


def acknowledgement(ctx: Context) -> Call:
    """The call a closing store sends to forget the replies it received: ``acknowledge``,
    to which the driver gives the lanes and the lane "", which remembers nothing."""
    return ctx.call("acknowledge", [])


def _buffered(reply: Sequence[Any], first: int) -> BufferedEvent:
    event, received, _ = codec.event_row(reply[first], reply[first + 1], reply[first + 2])
    return BufferedEvent(event, received)


#: How a remembered reply (a call re-sent after a lost reply) marks a payload it
#: withholds: it keeps no payload's bytes (``lua/_lib/core.lua``), so the payload is
#: read again, as it is now (erased or gone: null).
WITHHELD = (b"R", "R")


def _payloads_again(ctx: Context, triples: Sequence[Any]) -> Plan[list[Any]]:
    """``{row, has payload, payload}`` triples, each withheld payload read again."""
    out = []
    for triple in triples:
        if triple[1] not in WITHHELD:
            out.append(triple)
            continue
        event, _, _ = codec.event_row(triple[0])
        reply = yield ctx.call("lookup_event", [event.source, event.id])
        found = codec.check_status(reply) == "ROW"
        out.append([triple[0], reply[2], reply[3]] if found else [triple[0], b"0", b""])
    return out


def _claim(ctx: Context, reply: Sequence[Any]) -> Plan[BufferedEvent | None]:
    """The event of a claim's reply ``{"HIT", at, row, has payload, payload}``."""
    if codec.check_status(reply) != "HIT":
        return None
    (triple,) = yield from _payloads_again(ctx, [reply[2:5]])
    return _buffered(triple, 0)


# ---------------------------------------------------------------- events


def buffer(ctx: Context, event: InboundEvent, *, at: datetime | None = None) -> Plan[bool]:
    """Store the event as live unless its (source, id) exists; False for a duplicate."""
    args = codec.event_args(event, ctx.max_payload_bytes, ctx.max_correlation_keys)
    reply = yield from ctx.keyed("buffer", [ctx.at("at", at), *args], args[2], args[6:], split=True)
    return codec.check_status(reply) == "NEW"


def subscribe(ctx: Context, sub: Subscription, *, at: datetime | None = None) -> Plan[None]:
    """Register the wait's missing keys; a new wait takes its attributes from sub."""
    args = codec.subscription_args(sub, ctx.max_correlation_keys)
    call_args = [ctx.at("at", at), *args]
    codec.check_status(
        (
            yield from ctx.keyed(
                "subscribe",
                call_args,
                args[2],
                args[7:],
                split=True,
                waits=args[:1],
                registers=True,
            )
        )
    )
    ctx.remember_wait(args[0], args[1], args[2], args[7:], call_args[0])


def claim_for(
    ctx: Context, sub: Subscription, *, at: datetime | None = None
) -> Plan[BufferedEvent | None]:
    """Claim the oldest eligible buffered event for the wait, or recover its own claim."""
    args = codec.subscription_args(sub, ctx.max_correlation_keys)
    reply = yield from ctx.keyed(
        "claim_for", [ctx.at("at", at), *args], args[2], args[7:], waits=args[:1]
    )
    return (yield from _claim(ctx, reply))


def wait(
    ctx: Context, sub: Subscription, *, at: datetime | None = None
) -> Plan[BufferedEvent | None]:
    """subscribe, then claim_for, in one step with one instant."""
    args = codec.subscription_args(sub, ctx.max_correlation_keys)
    call_args = [ctx.at("at", at), *args]
    reply = yield from ctx.keyed(
        "wait", call_args, args[2], args[7:], waits=args[:1], registers=True
    )
    ctx.remember_wait(args[0], args[1], args[2], args[7:], call_args[0])
    return (yield from _claim(ctx, reply))


def _winners(
    ctx: Context, kind: str, pairs: Sequence[str]
) -> Plan[tuple[list[str], Callable[[], None]]]:
    """The runs whose wait buckets a call holding an election of waits (``deliver``,
    ``match_waiter``) of an event of ``kind`` with these keys (namespace, value,
    ...) names, and what to note once it is answered: the runs of the waits this
    store registered under the keys (``likely_runs``); where there are none, and
    the last such call met a wait (``reads_heads``), those of the waits first up
    for election there, then whether the next such call reads first
    (``heads_met``)."""
    likely = ctx.likely_runs(kind, pairs)
    if likely:
        return likely, _noted
    needs = ctx.wait_needs
    if not ctx.reads_heads():
        return [], lambda: ctx.heads_met(False, [], needs)
    g = ctx.key_geometry
    hashes, buckets = [], []
    for i in range(0, len(pairs), 2):
        h = key_hash(kind, pairs[i], pairs[i + 1])
        hashes.append(f"{h:08x}")
        buckets.append(ctx.keys.key_bucket(g.bucket_of(h)))
    reply = yield ctx.call("election_heads", [g.text(), *hashes], more=buckets)
    found: dict[str, None] = {}
    if text(reply[0]) == "BUCKETS":  # the call then names the new geometry's buckets
        ctx.learn_key_geometry(Geometry.parse(text(reply[1])))
    else:
        for wid in reply[1:]:
            try:
                found[split_components(codec.raw(wid))[0]] = None
            except (ValueError, IndexError):  # a hint only: the call reports what is corrupt
                continue
    runs = list(found)
    return runs, lambda: ctx.heads_met(True, runs, needs)


def _noted() -> None:
    """Nothing to note (``_winners``)."""


def match_waiter(
    ctx: Context, event: InboundEvent, *, at: datetime | None = None
) -> Plan[Subscription | None]:
    """Offer the stored live event to the oldest eligible wait; the winner, or None."""
    args = codec.event_args(event, ctx.max_payload_bytes, ctx.max_correlation_keys)
    likely, noted = yield from _winners(ctx, args[2], args[6:])
    reply = yield from ctx.keyed(
        "match_waiter", [ctx.at("at", at), args[0], args[1]], args[2], args[6:], waits=likely
    )
    noted()
    if codec.check_status(reply) == "MATCHED":
        return codec.subscription_reply(reply[2])
    return None


def deliver(
    ctx: Context, event: InboundEvent, *, at: datetime | None = None
) -> Plan[DeliverOutcome]:
    """buffer, then match_waiter, in one step."""
    args = codec.event_args(event, ctx.max_payload_bytes, ctx.max_correlation_keys)
    call_args = [ctx.at("at", at), *args]
    likely, noted = yield from _winners(ctx, args[2], args[6:])
    reply = yield from ctx.keyed("deliver", call_args, args[2], args[6:], split=True, waits=likely)
    noted()
    status = codec.check_status(reply)
    if status == "RESUMED":
        return Resumed(codec.subscription_reply(reply[2]))
    return Buffered() if status == "BUFFERED" else Duplicate()


def deliver_to(
    ctx: Context, run: str, event: InboundEvent, *, at: datetime | None = None
) -> Plan[TargetedOutcome]:
    """Targeted delivery of a continuation addressed to run."""
    run = codec.ident("run", run)
    args = codec.event_args(event, ctx.max_payload_bytes, ctx.max_correlation_keys)
    reply = yield from ctx.keyed(
        "deliver_to", [ctx.at("at", at), run, *args], args[2], args[6:], waits=[run]
    )
    status = codec.check_status(reply)
    if status == "MATCHED":
        return Matched(codec.subscription_reply(reply[2]))
    return Duplicate() if status == "DUPLICATE" else NotWaiting()


def unsubscribe(ctx: Context, run: str, effect: str) -> Plan[None]:
    """Retire the wait and shed the claim made for it."""
    args = [codec.ident("run", run), codec.ident("effect", effect)]
    also, order = ctx.remembered_waits(args[0], args[1])
    reply = yield from ctx.keyed("unsubscribe", args, also=also, waits=args[:1], hinted=order)
    codec.check_status(reply)


def _retired(ctx: Context, reply: Sequence[Any]) -> Plan[Retired]:
    triples = yield from _payloads_again(ctx, reply[2])
    released = tuple(codec.event_row(r[0], r[1], r[2])[0] for r in triples)
    return Retired(codec.integer(reply[1]), released)


def unsubscribe_run(ctx: Context, run: str, unanswered: Sequence[str] = ()) -> Plan[Retired]:
    """Retire every wait of a concluded run; release unanswered claims, shed the rest."""
    args = [codec.ident("run", run), *codec.effects(unanswered)]
    also, order = ctx.remembered_waits(args[0])
    reply = yield from ctx.keyed("unsubscribe_run", args, also=also, waits=args[:1], hinted=order)
    codec.check_status(reply)
    return (yield from _retired(ctx, reply))


def park_wait(ctx: Context, sub: Subscription, *, at: datetime | None = None) -> Plan[None]:
    """Register the wait as subscribe does and park it."""
    args = codec.subscription_args(sub, ctx.max_correlation_keys)
    call_args = [ctx.at("at", at), *args]
    codec.check_status(
        (
            yield from ctx.keyed(
                "park_wait", call_args, args[2], args[7:], waits=args[:1], registers=True
            )
        )
    )
    ctx.remember_wait(args[0], args[1], args[2], args[7:], call_args[0])


def parked_waits(ctx: Context, limit: int = 100) -> Plan[list[Subscription]]:
    """Parked registered waits in (run, effect) order; retires sealed runs' marks."""
    subs, _cursor = yield from parked_waits_page(ctx, limit)
    return subs


def parked_waits_page(
    ctx: Context, limit: int = 100, after: str | None = None
) -> Plan[tuple[list[Subscription], str | None]]:
    """A page of parked waits after the cursor a previous page gave (as
    ``parked_waits``); and the cursor of this page's last wait (None at the end)."""
    room = codec.limit("limit", limit)
    out: list[Subscription] = []
    after_ = ["", ""]
    if after is not None:
        try:
            run, effect = json.loads(after)
            after_ = [codec.ident("run", run), codec.ident("effect", effect)]
        except (ValueError, TypeError, InvalidInput):
            raise InvalidInput(f"{after!r} is not a cursor a page of parked waits gave") from None
    ended = room == 0
    while room > 0:
        asked = min(room, LIST_BATCH)
        reply = yield from ctx.keyed("parked_waits", [asked, *after_, PARKED_BATCH])
        status = codec.check_status(reply)
        if status == "MORE":
            continue
        after_ = [text(reply[1]), text(reply[2])]
        page = [codec.subscription_reply(s) for s in reply[3:]]
        out += page
        room -= len(page)
        if status != "PART" and len(page) < asked:  # PART: a step of many keys
            ended = True
            break
    if ended or not out:
        return out, None
    return out, json.dumps([out[-1].run, out[-1].effect], ensure_ascii=False)


def erase_payload(ctx: Context, source: str, id: str) -> Plan[bool]:
    """Remove the payload for good, keeping the identity; whether a row existed."""
    args = [codec.ident("source", source), codec.ident("id", id)]
    return codec.check_status((yield from ctx.keyed("erase_payload", args))) == "ERASED"


def minter(ctx: Context, source: str, id: str) -> Plan[Minter | None]:
    """Who minted the stored event; None when no such row exists."""
    args = [codec.ident("source", source), codec.ident("id", id)]
    reply = yield ctx.call("minter", args)
    if codec.check_status(reply) == "NONE":
        return None
    return Minter(codec.row_minter(reply[1], reply[2]))


def sweep_unclaimed(ctx: Context, older_than: datetime, reason: str = "unclaimed") -> Plan[int]:
    """Dead-letter every live row received at or before older_than; the total."""
    cutoff = codec.instant("older_than", older_than)
    reason = codec.reason(reason)
    total = 0
    while True:
        reply = yield from ctx.keyed("sweep_unclaimed", [cutoff, reason, SWEEP_BATCH])
        status = codec.check_status(reply)
        done = codec.integer(reply[1])
        total += done
        if status != "MORE" and done < SWEEP_BATCH:  # MORE: a step of large rows
            return total


def dead_letters(ctx: Context, limit: int = 100) -> Plan[list[DeadLetter]]:
    """Dead rows, newest first, in steps of at most LIST_BATCH rows (fewer where their
    payloads are large: a step returns about a MiB at most)."""
    letters, _cursor = yield from dead_letters_page(ctx, limit)
    return letters


def dead_letters_page(
    ctx: Context, limit: int = 100, after: str | None = None
) -> Plan[tuple[list[DeadLetter], str | None]]:
    """A page of dead rows, newest first, after the cursor a previous page gave; and
    the cursor of this page's last row (None when the list ended within it)."""
    room = codec.listing("limit", limit)
    out: list[DeadLetter] = []
    cursor: bytes | str = codec.index_cursor("after", after)  # an index member
    ended = False
    while room > 0:
        asked = min(room, LIST_BATCH)
        reply = yield ctx.call("dead_letters", [asked, cursor])
        status = codec.check_status(reply)
        rows = codec.listed_rows(reply)
        for event, received, row in rows:
            out.append(DeadLetter(event, received, codec.dead_reason(row.reason)))
        room -= len(rows)
        cursor = reply[1] or cursor
        if status != "MORE" and len(rows) < asked:
            ended = True
            break
    return out, None if ended or not out else text(cursor)


def waiting(ctx: Context, limit: int = 100) -> Plan[list[Subscription]]:
    """Wait key rows in registration order, one key each."""
    subs, _cursor = yield from waiting_page(ctx, limit)
    return subs


def waiting_page(
    ctx: Context, limit: int = 100, after: str | None = None
) -> Plan[tuple[list[Subscription], str | None]]:
    """A page of wait key rows in registration order, after the cursor a previous
    page gave; and the cursor of this page's last row (None when the list ended)."""
    room = codec.listing("limit", limit)
    out: list[Subscription] = []
    cursor: bytes | str = codec.index_cursor("after", after, waiting=True)
    while room > 0:
        asked = min(room, LIST_BATCH)
        reply = yield from ctx.keyed("waiting", [asked, cursor])
        status = codec.check_status(reply)
        rows = reply[2:]
        out += [codec.subscription(r[0], r[1], r[2], [r[3], r[4]]) for r in rows]
        room -= len(rows)
        cursor = reply[1] or cursor
        if status != "MORE" and len(rows) < asked:
            return out, None
    return out, text(cursor) if out else None


def purge(ctx: Context, older_than: datetime, *, limit: int = 1000) -> Plan[int]:
    """Remove up to limit dead or consumed rows received at or before older_than."""
    cutoff = codec.instant("older_than", older_than)
    left = codec.limit("limit", limit)
    total = 0
    while left > 0:
        asked = min(left, PURGE_BATCH)
        reply = yield ctx.call("purge", [cutoff, asked])
        status = codec.check_status(reply)
        done = codec.integer(reply[1])
        total += done
        left -= done
        if done < asked and status != "MORE":  # MORE: a step of large rows
            break
    return total


def stats(ctx: Context) -> Plan[EventStats]:
    """Exact counts, one snapshot."""
    reply = yield ctx.call("stats", [])
    codec.check_status(reply)
    return EventStats(*(codec.integer(x) for x in reply[1:7]))


def lookup(ctx: Context, source: str, id: str) -> Plan[EventRecord | None]:
    """One stored event, whatever its state, with its claim; None when there is none."""
    args = [codec.ident("source", source), codec.ident("id", id)]
    reply = yield ctx.call("lookup_event", args)
    if codec.check_status(reply) == "NONE":
        return None
    event, received, row = codec.event_row(reply[1], reply[2], reply[3])
    return EventRecord(
        event,
        received,
        row.state,
        row.holder,
        None if row.claimed_ms is None else codec.to_datetime(row.claimed_ms),
        codec.dead_reason(row.reason) if row.state == "dead" else None,
        row.erased,
        row.targeted,
    )


def lookup_wait(ctx: Context, run: str, effect: str) -> Plan[WaitRecord | None]:
    """One registered wait, its parked mark and the event it holds; None when unregistered."""
    args = [codec.ident("run", run), codec.ident("effect", effect)]
    reply = yield from ctx.keyed("lookup_wait", args, waits=args[:1])
    if codec.check_status(reply) == "NONE":
        return None
    parked, held = codec.raw(reply[2]), codec.raw(reply[3])
    holds = None
    if held:
        source, id_ = split_components(held)
        holds = (source, id_)
    when = codec.stored_instant(f"mark of ({run!r}, {effect!r})", parked) if parked else None
    return WaitRecord(codec.subscription_reply(reply[1]), when, holds)


def oldest_live(ctx: Context) -> Plan[datetime | None]:
    """When the oldest live event (unclaimed, not dead) was received; None when none is."""
    reply = yield from ctx.keyed("oldest_live", [])
    codec.check_status(reply)
    return codec.to_datetime(codec.integer(reply[1])) if len(reply) > 1 else None


# ---------------------------------------------------------------- runs


def seal(ctx: Context, run: str) -> Plan[bool]:
    """Seal the run; True when newly sealed."""
    args = [ctx.at("at", None), codec.ident("run", run)]
    also, _ = ctx.remembered_waits(args[1])  # sealed, its waits leave the election for good
    reply = yield from ctx.keyed("seal", args, run=args[1], also=also, waits=args[1:2])
    return codec.check_status(reply) == "NEW"


def is_sealed(ctx: Context, run: str) -> Plan[bool]:
    """Whether the run is sealed."""
    reply = yield ctx.call("is_sealed", [codec.ident("run", run)])
    codec.check_status(reply)
    return codec.integer(reply[1]) == 1


def close(ctx: Context, run: str, unanswered: Sequence[str] = ()) -> Plan[Closed]:
    """seal, unsubscribe_run and disarm_run, in one step."""
    args = [ctx.at("at", None), codec.ident("run", run), *codec.effects(unanswered)]
    also, order = ctx.remembered_waits(args[1])
    reply = yield from ctx.keyed(
        "close", args, run=args[1], also=also, waits=args[1:2], hinted=order
    )
    codec.check_status(reply)
    retired = yield from _retired(ctx, reply)
    return Closed(retired, codec.integer(reply[3]), text(reply[4]) == "1")


# ---------------------------------------------------------------- timers


def arm(ctx: Context, timer: Timer) -> Plan[bool]:
    """Store the timer unless (run, effect) is armed; first arming wins."""
    args = codec.timer_args(timer)
    reply = yield from ctx.bucketed("arm", lambda g: (args, ctx.keys.timer_split(g)), args[0])
    if codec.check_status(reply) != "NEW":
        return False
    if len(reply) > 1:  # this arming split a bucket
        ctx.learn(reply[1:])
    return True


def claim_due(
    ctx: Context, *, now: datetime | None = None, limit: int = 128, lease: object = None
) -> Plan[list[Timer]]:
    """Claim due timers under a lease, soonest first, until limit are claimed."""
    when = codec.optional_instant("now", now)
    want = codec.listing("limit", limit)
    lease_ms = ctx.timer_lease_ms if lease is None else codec.duration_ms("lease", lease)
    if when is not None and when + lease_ms > codec.MAX_INSTANT:
        raise InvalidInput("now + lease is past 9999-12-31T23:59:59.999Z")
    if want == 0:
        return []
    at = str(when) if when is not None else ctx.at("now", None)
    out: list[Timer] = []
    retire = ""  # a sealed run the walk met: the next step gets its bucket
    skip = "0"  # entries at the walk's head passed over: leases live for this clock
    while len(out) < want:
        args: list[Arg] = [at, want - len(out), lease_ms, TIMER_SCAN, retire, skip]
        reply = yield from ctx.bucketed("claim_due", args, retire)
        status = codec.check_status(reply)
        at, skip = text(reply[1]), text(reply[4])
        out += _claimed(reply[5:])
        if status == "RETIRE":
            retire = text(reply[3])
            continue
        retire = ""
        if text(reply[2]) != "1":
            break
    return out


def disarm(ctx: Context, run: str, effect: str) -> Plan[bool]:
    """Delete the timer; whether it existed."""
    args = [codec.ident("run", run), codec.ident("effect", effect)]
    return codec.check_status((yield from ctx.bucketed("disarm", args, args[0]))) == "REMOVED"


def disarm_many(ctx: Context, timers: Iterable[Timer | tuple[str, str]]) -> Plan[int]:
    """Delete each timer, given as a ``Timer`` or a ``(run, effect)`` pair; how many
    existed. A batch completion: steps of ``DISARM_BATCH`` timers, each atomic."""
    if isinstance(timers, (str, bytes, Timer)):
        raise InvalidInput("timers must be an iterable of Timer or (run, effect) pairs")
    pairs: dict[tuple[str, str], None] = {}
    for t in timers:
        if isinstance(t, Timer):
            run, effect = t.run, t.effect
        elif isinstance(t, tuple) and len(t) == 2:
            run, effect = t
        else:
            raise InvalidInput(f"not a Timer or a (run, effect) pair: {t!r}")
        pairs[(codec.ident("run", run), codec.ident("effect", effect))] = None
    order = list(pairs)
    removed = 0
    first_key = bucket_index("disarm_many")
    for first in range(0, len(order), DISARM_BATCH):
        step = order[first : first + DISARM_BATCH]
        reply = yield from ctx.bucketed(
            "disarm_many", partial(_disarm_step, ctx, step, first_key), step[0][0]
        )
        codec.check_status(reply)
        removed += codec.integer(reply[1])
    return removed


def _disarm_step(
    ctx: Context, step: Sequence[tuple[str, str]], first_key: int, g: Geometry
) -> tuple[list[Arg], list[str]]:
    """A disarm_many step's timers by bucket (the bucket's index in KEYS, how many
    timers, then each one's id) and further keys: one key per bucket the step's runs
    are in; the first run's takes the script's bucket slot, the others follow its
    keys."""
    by_bucket: dict[str, list[bytes]] = {}
    for run, effect in step:
        by_bucket.setdefault(ctx.keys.timer_bucket(run, g), []).append(tuple_member((run, effect)))
    args: list[Arg] = []
    for i, ids in enumerate(by_bucket.values()):
        args += [first_key + i, len(ids), *ids]
    return args, list(by_bucket)[1:]


def disarm_run(ctx: Context, run: str) -> Plan[int]:
    """Delete every timer of the run; how many existed."""
    run = codec.ident("run", run)
    reply = yield from ctx.bucketed("disarm_run", [run], run)
    codec.check_status(reply)
    return codec.integer(reply[1])


def pending_count(ctx: Context) -> Plan[int]:
    """Every timer of the tenant, exact."""
    reply = yield ctx.call("pending_count", [])
    codec.check_status(reply)
    return codec.integer(reply[1])


def _timers(flat: Sequence[Any]) -> list[Timer]:
    """Timers as the scripts answer them: each one's member, then its fire_at."""
    return [codec.timer_member(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def _claimed(flat: Sequence[Any]) -> list[Timer]:
    """Timers claim_due claimed: each one's member, fire_at and claim count."""
    return [
        codec.timer_member(flat[i], flat[i + 1], codec.integer(flat[i + 2]))
        for i in range(0, len(flat), 3)
    ]


def _soonest(timers: Iterable[Timer]) -> list[Timer]:
    """Timers in the walk's order: (fire_at, run, effect), strings by bytes."""
    return sorted(timers, key=lambda t: (t.fire_at, component(t.run), component(t.effect)))


def pending(ctx: Context, limit: int = 100) -> Plan[list[Timer]]:
    """All timers, soonest first."""
    timers, _cursor = yield from pending_page(ctx, limit)
    return timers


def pending_page(
    ctx: Context, limit: int = 100, after: str | None = None
) -> Plan[tuple[list[Timer], str | None]]:
    """A page of timers, soonest first, after the cursor a previous page gave; and
    the cursor of this page's last timer (None when no timer comes after it)."""
    n = codec.listing("limit", limit)
    fire, member = codec.timer_cursor("after", after)
    if n == 0:
        return [], None
    reply = yield ctx.call("pending", [n + 1, fire, member])
    codec.check_status(reply)
    found = _soonest([*_timers(reply[1]), *_timers(reply[2])])
    page = found[:n]
    if len(found) <= n or not page:
        return page, None
    last = page[-1]
    tid = tuple_member([last.run, last.effect])
    attrs = timer_attrs(last.step, last.phase.value, last.case)
    ms = codec.instant("fire_at", last.fire_at)
    return page, f"{ms}:{(tid + attrs).decode('utf-8')}"


def armed(ctx: Context, run: str) -> Plan[list[Timer]]:
    """One run's timers, in effect order."""
    run = codec.ident("run", run)
    reply = yield from ctx.bucketed("armed", [run], run)
    codec.check_status(reply)
    return sorted(_timers(reply[1:]), key=lambda t: component(t.effect))


def lookup_timer(ctx: Context, run: str, effect: str) -> Plan[TimerRecord | None]:
    """One armed timer with its claim (claimed_at, lease); None when it is not armed."""
    run, effect = codec.ident("run", run), codec.ident("effect", effect)
    reply = yield from ctx.bucketed("lookup_timer", [run, effect], run)
    if codec.check_status(reply) == "NONE":
        return None
    timer = codec.timer_member(reply[1], reply[2])
    claimed, lease, count = codec.timer_claim(timer, reply[3])
    return TimerRecord(
        timer,
        None if claimed is None else codec.to_datetime(claimed),
        None if lease is None else timedelta(milliseconds=lease),
        count,
    )


def next_due(ctx: Context) -> Plan[datetime | None]:
    """The soonest timer's fire_at, or None: the sooner of the two lists' first
    (each list is in fire_at order), read without the rest of its timer."""
    reply = yield ctx.call("pending", [1, "", b""])
    codec.check_status(reply)
    soonest = [codec.stored_instant("timer", first[1]) for first in (reply[1], reply[2]) if first]
    return min(soonest, default=None)


def next_claim_in(ctx: Context) -> Plan[timedelta | None]:
    """How long until ``claim_due`` can claim a timer, by the store's clock: until the
    soonest unheld timer's fire_at or the soonest lease expiry, whichever is first;
    zero or less when one is claimable now; None when there are no timers."""
    reply = yield ctx.call("next_claim", [ctx.at("now", None)])
    codec.check_status(reply)
    now = codec.integer(reply[1])
    soonest = [codec.integer(value) for value in reply[2:4] if text(value) != ""]
    return timedelta(milliseconds=min(soonest) - now) if soonest else None


def reschedule(
    ctx: Context, run: str, effect: str, fire_at: datetime, *, release: bool = False
) -> Plan[bool]:
    """Set an armed timer's fire_at (contract 11); False when it is not armed or is
    under a live lease (nothing changed). ``release=True`` is for the lease's
    holder: a worker whose handler failed puts the timer back to fire at
    ``fire_at`` (its backoff) without waiting for the lease to lapse."""
    release = codec.flag("release", release)
    run = codec.ident("run", run)
    args: list[Arg] = [
        run,
        codec.ident("effect", effect),
        codec.instant("fire_at", fire_at),
        ctx.at("now", None),
        "1" if release else "0",
    ]
    return codec.check_status((yield from ctx.bucketed("reschedule", args, run))) == "OK"


def heartbeat(
    ctx: Context, worker: str, record: dict[str, Any] | None, ttl: timedelta
) -> Plan[int]:
    """Keeps ``worker``'s entry in the tenant's registry (``record``, JSON-able) or,
    with None, removes it; drops the entries not renewed within ``ttl``. How many
    were dropped."""
    worker = codec.ident("worker", worker)
    text_ = "" if record is None else json.dumps(record, sort_keys=True, default=str)
    ttl_ms = codec.duration_ms("ttl", ttl)
    reply = yield ctx.call("heartbeat", [worker, text_, ctx.at("now", None), ttl_ms])
    codec.check_status(reply)
    return codec.integer(reply[1])


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One running worker, as its last heartbeat left it (``workers.running``)."""

    worker: str
    beat_at: datetime
    record: dict[str, Any]


def running_workers(ctx: Context) -> Plan[list[WorkerEntry]]:
    """The workers registered for the tenant, oldest first (the entries of workers
    whose beats stopped are dropped by the next heartbeat)."""
    reply = yield ctx.call("workers", [])
    codec.check_status(reply)
    flat = reply[1]
    out = []
    for i in range(0, len(flat), 2):
        worker, stored = text(flat[i]), text(flat[i + 1])
        at, _, body = stored.partition(" ")
        try:
            record = json.loads(body)
        except ValueError:
            codec.fail_corrupt(f"worker {worker!r}", "its record is not JSON")
        if not isinstance(record, dict):
            codec.fail_corrupt(f"worker {worker!r}", "its record is not a JSON object")
        out.append(WorkerEntry(worker, codec.stored_instant(f"worker {worker!r}", at), record))
    return sorted(out, key=lambda e: (str(e.record.get("started", "")), e.worker))


def revive(
    ctx: Context, source: str, id: str, *, at: datetime | None = None
) -> Plan[Resumed | Buffered | None]:
    """A dead letter back to live at ``at`` (contract 11), then matched as ``deliver``
    matches; None, and nothing changed, when ``(source, id)`` is not dead."""
    args = [ctx.at("at", at), codec.ident("source", source), codec.ident("id", id)]
    reply = yield from ctx.keyed("revive", args)
    status = codec.check_status(reply)
    if status == "RESUMED":
        return Resumed(codec.subscription_reply(reply[2]))
    return Buffered() if status == "BUFFERED" else None


def lookup_run(ctx: Context, run: str) -> Plan[RunRecord]:
    """One run's whole state in one step (contract 11): sealed or not, its waits
    (parked or not, the event each holds), its timers with their claims."""
    run = codec.ident("run", run)
    reply = yield from ctx.keyed("lookup_run", [run], run=run, waits=[run])
    codec.check_status(reply)
    sealed = codec.raw(reply[1])
    waits = []
    for entry in reply[2]:
        sub = codec.subscription_reply(entry[0])
        parked, held = codec.raw(entry[1]), codec.raw(entry[2])
        what = f"mark of ({sub.run!r}, {sub.effect!r})"
        waits.append(
            WaitRecord(
                sub,
                codec.stored_instant(what, parked) if parked else None,
                tuple(split_components(held)) if held else None,  # type: ignore[arg-type]
            )
        )
    flat, timers = reply[3], []
    for i in range(0, len(flat), 3):
        timer = codec.timer_member(flat[i], flat[i + 1])
        claimed, lease, count = codec.timer_claim(timer, flat[i + 2])
        timers.append(
            TimerRecord(
                timer,
                None if claimed is None else codec.to_datetime(claimed),
                None if lease is None else timedelta(milliseconds=lease),
                count,
            )
        )
    return RunRecord(
        run,
        bool(sealed),
        tuple(sorted(waits, key=lambda w: component(w.subscription.effect))),
        tuple(sorted(timers, key=lambda t: component(t.timer.effect))),
        codec.stored_instant(f"seal of {run!r}", sealed) if sealed else None,
    )


def live_page(
    ctx: Context, limit: int = 100, after: str | None = None, *, newest: bool = False
) -> Plan[tuple[list[BufferedEvent], str | None]]:
    """A page of live events (buffered, unclaimed), oldest first (``newest``: newest
    first), after the cursor a previous page gave; and the cursor of this page's
    last event (None when the list ended within it)."""
    room = codec.listing("limit", limit)
    out: list[BufferedEvent] = []
    cursor: bytes | str = codec.index_cursor("after", after)
    order = "newest" if codec.flag("newest", newest) else "oldest"
    while room > 0:
        asked = min(room, LIST_BATCH)
        reply = yield from ctx.keyed("live_events", [asked, cursor, order])
        status = codec.check_status(reply)
        rows = codec.listed_rows(reply)
        out += [BufferedEvent(event, received) for event, received, _row in rows]
        room -= len(rows)
        cursor = reply[1] or cursor
        if status != "MORE" and len(rows) < asked:
            return out, None
    return out, text(cursor) if out else None


def timer_stats(ctx: Context) -> Plan[TimerStats]:
    """How many timers are armed, due (unheld, fire time reached by the store's
    clock) and held; each exact, O(log n)."""
    reply = yield ctx.call("timer_stats", [ctx.at("now", None)])
    codec.check_status(reply)
    return TimerStats(*(codec.integer(v) for v in reply[1:4]))
