"""The values users build and receive: frozen, slotted dataclasses and enums.

Constructors do not validate; the store validates every argument in full
before anything reaches Redis (contract 9.1), so a value can be built, logged
or compared freely and is refused only where it would be stored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeAlias

#: A JSON value as the store accepts it: read back with ``json.loads``.
JSON: TypeAlias = (
    bool | int | float | str | list["JSON"] | tuple["JSON", ...] | dict[str, "JSON"] | None
)


class Phase(str, enum.Enum):
    """Which pass of a run a wait or timer belongs to."""

    FORWARD = "forward"
    COMPENSATING = "compensating"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class CorrelationKey:
    """A business key an event is routed by, such as ``order/A-1``."""

    namespace: str
    value: str


@dataclass(frozen=True, slots=True)
class Operator:
    """Who on this plane minted a message."""

    actor: str
    basis: str


@dataclass(frozen=True, slots=True)
class InboundEvent:
    """A message from outside, identified by ``(source, id)``."""

    source: str
    id: str
    kind: str
    payload: JSON = None
    correlation: tuple[CorrelationKey, ...] = ()
    by: Operator | None = None

    def correlate(self, namespace: str, value: str) -> InboundEvent:
        """A copy of this event with one more correlation key."""
        return replace(self, correlation=(*self.correlation, CorrelationKey(namespace, value)))


@dataclass(frozen=True, slots=True)
class Subscription:
    """A wait ``(run, effect)``: what it waits for and where the run resumes."""

    run: str
    effect: str
    kind: str
    correlation: tuple[CorrelationKey, ...]
    step: int = 0
    phase: Phase = Phase.FORWARD
    case: str | None = None
    from_source: str | None = None

    def correlate(self, namespace: str, value: str) -> Subscription:
        """A copy of this wait with one more correlation key."""
        return replace(self, correlation=(*self.correlation, CorrelationKey(namespace, value)))


@dataclass(frozen=True, slots=True)
class Timer:
    """A durable timer ``(run, effect)`` that fires at ``fire_at``."""

    run: str
    effect: str
    fire_at: datetime
    step: int = 0
    phase: Phase = Phase.FORWARD
    case: str | None = None
    #: On a timer ``claim_due`` returned: which claim of it this is (1 for the first;
    #: a handler that failed before makes it 2, ...). 0 on every other timer. Not
    #: compared: the same timer is equal whatever its claim.
    attempt: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class BufferedEvent:
    """An event as stored, with the instant it was received."""

    event: InboundEvent
    received_at: datetime


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event nobody claimed (or whose payload was erased), with the reason."""

    event: InboundEvent
    received_at: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Matched:
    """``deliver_to``: the event is held for this wait of the addressed run."""

    subscription: Subscription


@dataclass(frozen=True, slots=True)
class Duplicate:
    """``deliver`` / ``deliver_to``: the ``(source, id)`` was already seen."""


@dataclass(frozen=True, slots=True)
class NotWaiting:
    """``deliver_to``: the run has no unparked wait for this event; nothing was stored."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """``deliver``: the event was claimed for this waiting run."""

    subscription: Subscription


@dataclass(frozen=True, slots=True)
class Buffered:
    """``deliver``: the event was stored; no wait claimed it yet."""


@dataclass(frozen=True, slots=True)
class Retired:
    """What ``unsubscribe_run`` retired: registered waits, and events released."""

    waits: int
    released: tuple[InboundEvent, ...]


@dataclass(frozen=True, slots=True)
class Closed:
    """What ``runs.close`` did."""

    retired: Retired
    timers: int
    newly_sealed: bool


@dataclass(frozen=True, slots=True)
class Minter:
    """Who minted a stored event; ``operator`` is None for one that arrived over a wire."""

    operator: Operator | None


@dataclass(frozen=True, slots=True)
class EventStats:
    """Exact counts of one tenant's event store, read in one snapshot."""

    live: int
    claimed: int
    consumed: int
    dead: int
    waits: int
    parked: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored event as an operator sees it (``events.lookup``)."""

    event: InboundEvent
    received_at: datetime
    #: "live", "held", "consumed" or "dead"
    state: str
    #: The wait (run, effect) holding or having consumed it.
    holder: tuple[str, str] | None
    claimed_at: datetime | None
    #: A dead letter's reason.
    reason: str | None
    erased: bool
    targeted: bool


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """One registered wait (``events.lookup_wait``)."""

    subscription: Subscription
    parked_at: datetime | None
    #: The (source, id) of the event its claim holds.
    holds: tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """One armed timer with its claim (``timers.lookup``)."""

    timer: Timer
    claimed_at: datetime | None
    lease: timedelta | None
    #: How many times ``claim_due`` has handed the timer out (0 before the first).
    claims: int = 0


@dataclass(frozen=True, slots=True)
class TimerStats:
    """``timers.stats()``: timers armed (all of them), due (unheld, their fire time
    reached) and held (under a lease)."""

    armed: int
    due: int
    held: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run's whole state (``runs.lookup``), read in one step."""

    run: str
    sealed: bool
    #: Its waits (registered), in effect order.
    waits: tuple[WaitRecord, ...]
    #: Its armed timers, in effect order, with their claims.
    timers: tuple[TimerRecord, ...]
    #: When it was sealed; None when it is not.
    sealed_at: datetime | None = None


DeliverOutcome: TypeAlias = Resumed | Buffered | Duplicate
TargetedOutcome: TypeAlias = Matched | Duplicate | NotWaiting
