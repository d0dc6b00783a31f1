"""The worker: the periodic passes a runtime runs (contract 1.3, obligation 5).

One pass over each store: claim due timers and hand each to ``on_timer``,
disarming those whose handler returned, the page's in one ``disarm_many`` (an
exception leaves a timer claimed, so the lease expiry retries it); hand each
parked wait and the event it holds to ``on_redelivery``; sweep events older
than ``sweep_grace`` into dead letters and purge rows older than
``retention`` (both off unless given); then sleep until a timer can next be
claimed (``timers.next_claim_in``), the next redelivery or housekeeping pass,
or ``poll_interval``, whichever is soonest.

While it sleeps, one thread (a task, for ``AsyncWorker``) per store blocks on
the server (``timers.wait_for_wake``, a ``BLPOP`` of at most ``WAKE_BLOCK_S``
at a time) and wakes the loop when an ``arm`` makes a timer due sooner than
every timer before it, or a ``park_wait`` parks a wait for redelivery (then
the redelivery pass runs at once): one marker wakes one worker, so a timer
armed 200 ms ahead fires on time instead of at the next poll, and an idle
worker sends the server a few commands a minute.

The pass is decided once, by ``plan_pass``, a generator that does no I/O: it
yields store calls and handler batches, and the sync ``Worker`` or the asyncio
``AsyncWorker`` carries them out. Signals, backoff and reconnection live in
the loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeAlias

import redis

from .errors import InvalidInput, LibraryMissing, ServerBusy
from .model import BufferedEvent, Subscription, Timer
from .store import WAKE_BLOCK_S

log = logging.getLogger("agentplane_redis.worker")

#: Failures after which a pass is retried with backoff: the server is away.
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
#: Transient server states: a label (metrics), the error code the server answers
#: with, the class redis-py or the store gives it, and what an operator reads.
TRANSIENT: tuple[tuple[str, str, type[BaseException], str], ...] = (
    ("busy", "BUSY", ServerBusy, "busy running a long script"),
    ("oom", "OOM", redis.exceptions.OutOfMemoryError, "out of memory (maxmemory reached)"),
    ("readonly", "READONLY", redis.exceptions.ReadOnlyError, "read-only (a replica)"),
    ("loading", "LOADING", redis.exceptions.BusyLoadingError, "loading its data set"),
    ("masterdown", "MASTERDOWN", redis.exceptions.MasterDownError, "a replica, master down"),
    ("clusterdown", "CLUSTERDOWN", redis.exceptions.ClusterDownError, "a cluster that is down"),
    ("tryagain", "TRYAGAIN", redis.exceptions.TryAgainError, "moving the tenant's slot"),
    ("library", "", LibraryMissing, "without the library (agentplane-redis library loads it)"),
)


def transient(error: BaseException) -> tuple[str, str] | None:
    """A transient server state's label and what it is, in an operator's words; None
    when the error is not one (a bug, corruption, a refused grant: the worker stops)."""
    for label, code, cls, said in TRANSIENT:
        plain = type(error) is redis.exceptions.ResponseError  # the code not mapped
        if isinstance(error, cls) or (plain and code and str(error).split(" ")[0] == code):
            return label, said
    if isinstance(error, UNREACHABLE):
        return "unreachable", "unreachable"
    return None


#: How often a running worker renews its entry in each tenant's registry by default
#: (seconds, ``heartbeat_interval``), and after how many missed beats it is dropped.
HEARTBEAT_S = 10.0
MISSED_BEATS = 3

#: Lateness samples a worker keeps per tenant between two beats, at most.
MAX_SAMPLES = 10_000

#: A handler still running after this share of its lease is logged loudly.
LEASE_WARNING = 0.8


@dataclass(frozen=True, slots=True)
class Settings:
    """How a worker works; every field is a keyword argument of ``Worker``."""

    lease: timedelta = timedelta(seconds=60)
    batch: int = 64
    #: The longest sleep between passes: wake-ups make idle polling needless, so this
    #: only bounds how long a lost wake (a wake list lost in a failover) could delay.
    poll_interval: float = 30.0
    concurrency: int = 1
    redelivery_interval: float = 10.0
    sweep_grace: timedelta | None = None
    retention: timedelta | None = None
    housekeeping_interval: float = 60.0
    max_backoff: float = 30.0
    #: Whether the worker blocks on the server for wake-ups between passes. Off, it
    #: polls every ``poll_interval`` (for a proxy that refuses blocking commands).
    wake: bool = True
    #: How often the worker renews its entry in each tenant's registry, in seconds; an
    #: entry MISSED_BEATS intervals old is dropped.
    heartbeat_interval: float = HEARTBEAT_S
    #: A timer whose handler raised fires again after ``retry_delay`` seconds, doubled
    #: with each further failed claim up to ``max_retry_delay``.
    retry_delay: float = 1.0
    max_retry_delay: float = 600.0
    #: After this many failed claims the worker gives up: ``on_give_up`` is called and
    #: the timer disarmed. None: retry for ever.
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.lease, timedelta) or self.lease <= timedelta(0):
            raise InvalidInput("lease must be a positive timedelta")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise InvalidInput("batch must be an int of at least 1")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise InvalidInput("concurrency must be an int")
        if self.concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise InvalidInput("max_attempts must be an int of at least 1, or None")
        for name in (
            "poll_interval",
            "redelivery_interval",
            "housekeeping_interval",
            "retry_delay",
            "max_retry_delay",
            "heartbeat_interval",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise InvalidInput(f"{name} must be a positive number of seconds")
        if not isinstance(self.wake, bool):
            raise InvalidInput("wake must be True or False")
        for name in ("sweep_grace", "retention"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value < timedelta(0)):
                raise InvalidInput(f"{name} must be a timedelta of at least 0, or None")


@dataclass(slots=True)
class PassReport:
    """What one pass did (summed over the stores it served)."""

    claimed: int = 0
    handled: int = 0
    failed: int = 0
    redelivered: int = 0
    swept: int = 0
    purged: int = 0
    #: Timers given up on after ``max_attempts`` failed claims (and disarmed).
    gave_up: int = 0
    #: Seconds until the next pass should start.
    sleep: float = 0.0

    def add(self, other: PassReport) -> None:
        for name in ("claimed", "handled", "failed", "redelivered", "swept", "purged", "gave_up"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


# ---------------------------------------------------------------- the pass (pure)


@dataclass(frozen=True, slots=True)
class StoreCall:
    """Call ``store.<part>.<method>(*args, **kwargs)``; the reply is sent back."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HandleTimers:
    """Run ``on_timer`` for each; send back the timers whose handler returned, and
    each failed one with its error."""

    timers: tuple[Timer, ...]


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Run ``on_give_up`` for each (timer, error); send back the timers whose hook
    returned (every one where there is no hook): they are disarmed."""

    failures: tuple[tuple[Timer, BaseException], ...]


@dataclass(frozen=True, slots=True)
class HandleRedeliveries:
    """Run ``on_redelivery`` for each pair; send back how many returned."""

    pairs: tuple[tuple[Subscription, BufferedEvent], ...]


Step: TypeAlias = StoreCall | HandleTimers | GiveUp | HandleRedeliveries
PassPlan: TypeAlias = Generator[Step, Any, PassReport]


@dataclass(slots=True)
class Schedule:
    """When a store's periodic work last ran (monotonic seconds)."""

    redelivered: float = float("-inf")
    housekept: float = float("-inf")
    #: Passes in a row that found a timer claimable and claimed none (a claim this
    #: caller's clock sees as live): their retries back off.
    stalled: int = 0


#: The first pause after a pass that claimed nothing while a timer was claimable
#: (it became due between the two calls); doubled on each further such pass.
RETRY_SOON_S = 0.002


def plan_pass(
    settings: Settings,
    schedule: Schedule,
    *,
    now: float,
    wall: datetime,
    redelivery: bool,
    stopping: Callable[[], bool],
) -> PassPlan:
    """One pass over one store. ``now`` is monotonic seconds, ``wall`` the UTC time."""
    report = PassReport()
    if not stopping():
        timers = yield StoreCall(
            "timers.claim_due", kwargs={"limit": settings.batch, "lease": settings.lease}
        )
        report.claimed = len(timers)
        if timers:
            done, failed = yield HandleTimers(tuple(timers))
            report.handled, report.failed = len(done), len(failed)
            spent = tuple(
                (timer, error)
                for timer, error in failed
                if settings.max_attempts is not None and timer.attempt >= settings.max_attempts
            )
            ended = list((yield GiveUp(spent))) if spent else []
            report.gave_up = len(ended)
            if done or ended:  # the page's completed timers, in one batch completion
                yield StoreCall("timers.disarm_many", ((*done, *ended),))
            for timer, _error in failed:
                if timer not in ended:  # fires again after its backoff, not its lease
                    again = wall + timedelta(seconds=retry_delay(settings, timer.attempt))
                    yield StoreCall(
                        "timers.reschedule",
                        (timer.run, timer.effect, again),
                        {"release": True},
                    )
    if redelivery and not stopping() and now - schedule.redelivered >= settings.redelivery_interval:
        schedule.redelivered = now
        pairs = []
        for sub in (yield StoreCall("events.parked_waits", (settings.batch,))):
            held = yield StoreCall("events.claim_for", (sub,))
            if held is not None:
                pairs.append((sub, held))
        if pairs:
            report.redelivered = yield HandleRedeliveries(tuple(pairs))
    if not stopping() and now - schedule.housekept >= settings.housekeeping_interval:
        schedule.housekept = now
        if settings.sweep_grace is not None:
            reason = f"unclaimed for {settings.sweep_grace}"
            report.swept = yield StoreCall(
                "events.sweep_unclaimed", (wall - settings.sweep_grace, reason)
            )
        if settings.retention is not None:
            report.purged = yield StoreCall("events.purge", (wall - settings.retention,))
    if report.claimed == settings.batch:
        report.sleep = 0.0  # more may be due now
        schedule.stalled = 0
    else:
        wait = yield StoreCall("timers.next_claim_in")
        report.sleep = _sleep(
            settings, schedule, now=now, redelivery=redelivery, wait=wait, claimed=report.claimed
        )
    return report


def retry_delay(settings: Settings, attempt: int) -> float:
    """Seconds before a timer whose handler failed on its ``attempt``-th claim fires
    again: ``retry_delay`` doubled for each claim before, at most ``max_retry_delay``."""
    doubled = settings.retry_delay * 2.0 ** min(max(attempt - 1, 0), 40)
    return float(min(settings.max_retry_delay, doubled))


def _sleep(
    settings: Settings,
    schedule: Schedule,
    *,
    now: float,
    redelivery: bool,
    wait: timedelta | None,
    claimed: int,
) -> float:
    """Seconds until the next pass: until a timer can be claimed (``wait``), the next
    redelivery or housekeeping pass, or ``poll_interval``, whichever is soonest."""
    sleep = settings.poll_interval
    if wait is not None:
        seconds = wait.total_seconds()
        if seconds > 0:
            sleep, schedule.stalled = min(sleep, seconds), 0
        elif claimed:
            return 0.0  # claimable now, and this pass claimed: the next pass goes on
        else:
            sleep = min(sleep, RETRY_SOON_S * 2.0 ** min(schedule.stalled, 20))
            schedule.stalled += 1
    if redelivery:
        sleep = min(sleep, schedule.redelivered + settings.redelivery_interval - now)
    if settings.sweep_grace is not None or settings.retention is not None:
        sleep = min(sleep, schedule.housekept + settings.housekeeping_interval - now)
    return max(0.0, sleep)


def _check_handler(name: str, handler: Callable[..., Any], params: str) -> None:
    """Refuses, when the worker is made, a handler that cannot be called with
    ``params`` (instead of failing on the first timer, at run time)."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return
    try:
        signature.bind(*(None for _ in params.split(", ")))
    except TypeError as error:
        raise InvalidInput(f"{name} is called as {name}({params}); {handler!r}: {error}") from None


#: What a batch of timer handlers came to: the timers whose handler returned, and
#: each failed one with its error.
Outcomes: TypeAlias = tuple[list[Timer], list[tuple[Timer, BaseException]]]


def _outcomes(timers: Sequence[Timer], errors: Sequence[BaseException | None]) -> Outcomes:
    done = [t for t, e in zip(timers, errors, strict=True) if e is None]
    failed = [(t, e) for t, e in zip(timers, errors, strict=True) if e is not None]
    return done, failed


def _fields(store: Any, timer: Timer) -> dict[str, Any]:
    """A timer's log record fields (``--log-format json`` prints them)."""
    return {
        "tenant": store.tenant,
        "run": timer.run,
        "effect": timer.effect,
        "attempt": timer.attempt,
    }


def _method(store: Any, path: str) -> Any:
    part, name = path.split(".")
    return getattr(getattr(store, part), name)


# ---------------------------------------------------------------- the loops


class _Base:
    def __init__(
        self,
        stores: Any,
        *,
        on_timer: Callable[..., Any],
        on_redelivery: Callable[..., Any] | None = None,
        on_give_up: Callable[..., Any] | None = None,
        metrics: Any = None,
        **settings: Any,
    ) -> None:
        self.stores: list[Any] = list(stores) if isinstance(stores, Sequence) else [stores]
        if not self.stores:
            raise InvalidInput("a worker needs at least one store")
        if not callable(on_timer) or (on_redelivery is not None and not callable(on_redelivery)):
            raise InvalidInput("handlers must be callables")
        _check_handler("on_timer", on_timer, "store, timer")
        if on_redelivery is not None:
            _check_handler("on_redelivery", on_redelivery, "store, subscription, event")
        if on_give_up is not None:
            if not callable(on_give_up):
                raise InvalidInput("handlers must be callables")
            _check_handler("on_give_up", on_give_up, "store, timer, error")
        self.on_give_up = on_give_up
        self.settings = Settings(**settings)
        self.on_timer, self.on_redelivery = on_timer, on_redelivery
        self.schedules = [Schedule() for _ in self.stores]
        #: When the last pass finished without error (UTC), for a liveness probe.
        self.last_success: datetime | None = None
        self.metrics = metrics
        #: This worker in the tenants' registries (``store.workers``).
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.started = datetime.now(timezone.utc)
        self._beat_at = float("-inf")
        #: Per tenant, the lateness (s) of each timer started since the last beat.
        self._late: dict[str, list[float]] = {}
        self._stop = threading.Event()
        #: Set by a store's waker (a marker on its wake list) and by ``stop``.
        self._wake = threading.Event()
        self._failures = 0
        #: When the current outage began (monotonic s), and what it is; None: none.
        self._outage: tuple[float, tuple[str, str]] | None = None

    def stop(self) -> None:
        """Finish the handlers in hand, claim nothing new, and return from ``run``."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _passes(self) -> list[tuple[Any, PassPlan]]:
        now, wall = time.monotonic(), datetime.now(timezone.utc)
        redelivery = self.on_redelivery is not None
        return [
            (
                store,
                plan_pass(
                    self.settings,
                    schedule,
                    now=now,
                    wall=wall,
                    redelivery=redelivery,
                    stopping=self._stop.is_set,
                ),
            )
            for store, schedule in zip(self.stores, self.schedules, strict=True)
        ]

    def _recent(self, tenant: str, seconds: float) -> dict[str, Any]:
        """The timers a tenant's handlers started since the last beat: how many a
        second, and their lateness (p50, p99, max, in seconds); then forgotten."""
        samples = sorted(self._late.pop(tenant, []))
        out: dict[str, Any] = {"fired_per_s": round(len(samples) / max(seconds, 1e-3), 3)}
        if samples:
            out["late_p50"] = samples[len(samples) // 2]
            out["late_p99"] = samples[min(len(samples) - 1, int(0.99 * len(samples)))]
            out["late_max"] = samples[-1]
        return out

    def _record(self) -> dict[str, Any]:
        """What this worker says of itself in the registry."""
        from .metrics import package_version  # noqa: PLC0415

        last = self.last_success
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "tenants": [store.tenant for store in self.stores],
            "concurrency": self.settings.concurrency,
            "started": self.started.isoformat(),
            "last_pass": last.isoformat() if last else None,
            "version": package_version(),
        }

    def _beat_due(self) -> bool:
        return time.monotonic() - self._beat_at >= self.settings.heartbeat_interval

    def _beat_failed(self, store: Any, error: BaseException) -> None:
        log.debug("heartbeat to tenant %r failed: %r", store.tenant, error)

    def _until_beat(self, delay: float) -> float:
        """``delay``, cut to the time left until the next heartbeat."""
        beat = self._beat_at + self.settings.heartbeat_interval
        return max(0.0, min(delay, beat - time.monotonic()))

    def _woken(self, index: int, marker: str | None) -> bool:
        """Takes a store's wake marker: "r" makes its redelivery pass due now.
        Whether the loop is to wake."""
        if marker is None:
            return False
        if marker == "r":
            self.schedules[index].redelivered = float("-inf")
        return True

    def _waker_failed(self, error: BaseException, failures: int) -> float:
        """The pause before a waker blocks again after ``error`` (the passes report
        outages; this only keeps the waker from spinning)."""
        log.debug("waiting for a wake failed (%r); trying again", error)
        return float(min(self.settings.max_backoff, 0.1 * 2.0 ** min(failures, 20)))

    def _backoff(self, error: BaseException, state: tuple[str, str]) -> float:
        """After a pass that found the server away or in a transient state: the pause
        before the next try. Logged once per episode (and again when it changes)."""
        self._failures += 1
        if self.metrics is not None:
            self.metrics.reconnects.inc()
            self.metrics.server_errors.labels(state[0]).inc()
        delay: float = min(self.settings.max_backoff, 0.1 * 2.0 ** min(self._failures, 20))
        delay *= random.uniform(0.5, 1.0)
        if self._outage is None or self._outage[1] != state:
            log.warning(
                "the server is %s (%s): the worker claims nothing until it answers, and"
                " tries again with backoff (next in %.1f s, at most %.0f s apart)",
                state[1],
                error,
                delay,
                self.settings.max_backoff,
            )
            self._outage = (time.monotonic() if self._outage is None else self._outage[0], state)
        else:
            log.debug("the server is still %s (%s); next try in %.1f s", state[1], error, delay)
        return delay

    def _failed(self, error: BaseException) -> float:
        """The pause after a pass that raised; raises again what is not transient."""
        state = transient(error)
        if state is None:
            raise error
        return self._backoff(error, state)

    def _observed(self, store: Any, report: PassReport) -> None:
        if self.metrics is not None:
            self.metrics.observe_store_pass(store.tenant, report)

    def _succeeded(self, report: PassReport) -> None:
        if self._outage is not None:
            log.warning(
                "the server answers again after %.1f s (%d passes failed); the worker resumes",
                time.monotonic() - self._outage[0],
                self._failures,
            )
            self._outage = None
        self._failures = 0
        self.last_success = datetime.now(timezone.utc)
        if self.metrics is not None:
            self.metrics.observe_pass(report)

    def _starting(self, store: Any, timer: Timer) -> None:
        """A timer's handler is about to start: how late it fires."""
        late = (datetime.now(timezone.utc) - timer.fire_at).total_seconds()
        samples = self._late.setdefault(store.tenant, [])
        if len(samples) < MAX_SAMPLES:
            samples.append(late)
        if self.metrics is not None:
            self.metrics.observe_lateness(store.tenant, late)

    def _handled(
        self, store: Any, timer: Timer, started: float, error: BaseException | None
    ) -> None:
        elapsed = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.observe_handler(store.tenant, "timer", elapsed, error is None)
        if error is not None:
            limit = self.settings.max_attempts
            then = (
                "given up on"
                if limit is not None and timer.attempt >= limit
                else f"retried in {retry_delay(self.settings, timer.attempt):g} s"
            )
            log.error(
                "timer handler failed for tenant %r, run %r, effect %r (claim %d; %s): %r",
                store.tenant,
                timer.run,
                timer.effect,
                timer.attempt,
                then,
                error,
                exc_info=error,
                extra=_fields(store, timer),
            )

    def _gave_up(self, store: Any, timer: Timer, error: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.handled.labels(store.tenant, "give_up", "ok").inc()
        log.error(
            "gave up on timer (%r, %r) of tenant %r after %d failed claims (max_attempts);"
            " it is disarmed. Last error: %r",
            timer.run,
            timer.effect,
            store.tenant,
            timer.attempt,
            error,
            extra=_fields(store, timer),
        )

    def _give_up_failed(self, timer: Timer, error: BaseException) -> None:
        log.error(
            "on_give_up failed for timer (%r, %r): %r; the timer is kept and retried",
            timer.run,
            timer.effect,
            error,
            exc_info=error,
        )

    def _redelivery_failed(self, store: Any, sub: Subscription, error: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.handled.labels(store.tenant, "redelivery", "error").inc()
        log.error("redelivery handler failed for run %r, effect %r: %r", sub.run, sub.effect, error)

    def _lease_watch(self, timer: Timer) -> Callable[[], None]:
        def warn() -> None:
            log.critical(
                "timer handler for run %r, effect %r is still running at %d%% of its %s lease:"
                " the timer may fire again elsewhere; raise the lease",
                timer.run,
                timer.effect,
                LEASE_WARNING * 100,
                self.settings.lease,
            )

        return warn


class Worker(_Base):
    """The sync worker: ``Worker(stores, on_timer=..., on_redelivery=..., **settings)``.

    Handlers are plain callables, ``on_timer(store, timer)`` and
    ``on_redelivery(store, subscription, event)``; with ``concurrency`` above 1
    they run on that many threads.
    """

    def run_once(self) -> PassReport:
        """One pass over every store; raises what the server raises."""
        total = PassReport(sleep=self.settings.poll_interval)
        for store, plan in self._passes():
            report = self._drive(store, plan)
            self._observed(store, report)
            total.add(report)
            total.sleep = min(total.sleep, report.sleep)
        self._succeeded(total)
        return total

    def _drive(self, store: Any, plan: PassPlan) -> PassReport:
        reply: Any = None
        try:
            while True:
                step = plan.send(reply)
                if isinstance(step, StoreCall):
                    reply = _method(store, step.method)(*step.args, **step.kwargs)
                elif isinstance(step, HandleTimers):
                    reply = self._timers(store, step.timers)
                elif isinstance(step, GiveUp):
                    reply = self._give_up(store, step.failures)
                else:
                    reply = self._redeliveries(store, step.pairs)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    def _one_timer(self, store: Any, timer: Timer) -> BaseException | None:
        watch = threading.Timer(
            LEASE_WARNING * self.settings.lease.total_seconds(), self._lease_watch(timer)
        )
        watch.daemon = True
        watch.start()
        self._starting(store, timer)
        started, error = time.monotonic(), None
        try:
            self.on_timer(store, timer)
        except Exception as failed:
            error = failed
        finally:
            watch.cancel()
        self._handled(store, timer, started, error)
        return error

    def _timers(self, store: Any, timers: Sequence[Timer]) -> Outcomes:
        if self.settings.concurrency == 1:
            errors = [self._one_timer(store, t) for t in timers]
        else:
            with ThreadPoolExecutor(self.settings.concurrency) as pool:
                errors = list(pool.map(lambda t: self._one_timer(store, t), timers))
        return _outcomes(timers, errors)

    def _give_up(self, store: Any, failures: Sequence[tuple[Timer, BaseException]]) -> list[Timer]:
        ended = []
        for timer, error in failures:
            try:
                if self.on_give_up is not None:
                    self.on_give_up(store, timer, error)
            except Exception as failed:
                self._give_up_failed(timer, failed)
            else:
                self._gave_up(store, timer, error)
                ended.append(timer)
        return ended

    def _redeliveries(self, store: Any, pairs: Sequence[tuple[Subscription, BufferedEvent]]) -> int:
        assert self.on_redelivery is not None
        done = 0
        for sub, held in pairs:
            try:
                self.on_redelivery(store, sub, held)
                done += 1
            except Exception as failed:
                self._redelivery_failed(store, sub, failed)
        return done

    def run(self) -> None:
        """Pass after pass until ``stop()``, SIGTERM or SIGINT; rides out server outages
        and every transient server state (``TRANSIENT``), with backoff. Between
        passes it sleeps until the next one is due or a store's waker wakes it."""
        restore = _install_signals(self.stop)
        for index, store in enumerate(self.stores if self.settings.wake else ()):
            waker = threading.Thread(
                target=self._waker, args=(index, store), name="agentplane-waker", daemon=True
            )
            waker.start()
        try:
            while not self.stopping:
                self._wake.clear()  # a wake during the pass brings the next one forward
                try:
                    report = self.run_once()
                    delay = report.sleep
                except (redis.exceptions.RedisError, LibraryMissing) as error:
                    delay = self._failed(error)
                if self._beat_due():
                    self._beat(self._record())
                self._wake.wait(self._until_beat(delay))
        finally:
            self.stop()  # the wakers see it within WAKE_BLOCK_S
            self._beat(None)  # out of the registries
            restore()

    def _beat(self, record: dict[str, Any] | None) -> None:
        """Renews (or, with None, removes) this worker's entry in each tenant's registry,
        with what the tenant's timers did since the last beat."""
        since, self._beat_at = time.monotonic() - self._beat_at, time.monotonic()
        ttl = timedelta(seconds=self.settings.heartbeat_interval * MISSED_BEATS)
        for store in self.stores:
            mine = None if record is None else {**record, **self._recent(store.tenant, since)}
            try:
                store.workers.heartbeat(self.worker_id, mine, ttl)
            except Exception as error:  # the passes report what is wrong
                self._beat_failed(store, error)

    def _waker(self, index: int, store: Any) -> None:
        """Blocks on the store's wake list, again and again, until the worker stops."""
        failures = 0
        while not self.stopping:
            try:
                marker = store.timers.wait_for_wake(WAKE_BLOCK_S)
            except Exception as error:  # the passes report what is wrong
                failures += 1
                self._stop.wait(self._waker_failed(error, failures))
                continue
            failures = 0
            if self._woken(index, marker):
                self._wake.set()


class AsyncWorker(_Base):
    """The asyncio worker, with the arguments of ``Worker``; handlers may be coroutines
    (plain callables run on threads), at most ``concurrency`` at a time."""

    async def run_once(self) -> PassReport:
        total = PassReport(sleep=self.settings.poll_interval)
        for store, plan in self._passes():
            report = await self._drive(store, plan)
            self._observed(store, report)
            total.add(report)
            total.sleep = min(total.sleep, report.sleep)
        self._succeeded(total)
        return total

    async def _drive(self, store: Any, plan: PassPlan) -> PassReport:
        reply: Any = None
        try:
            while True:
                step = plan.send(reply)
                if isinstance(step, StoreCall):
                    reply = await _method(store, step.method)(*step.args, **step.kwargs)
                elif isinstance(step, HandleTimers):
                    reply = await self._timers(store, step.timers)
                elif isinstance(step, GiveUp):
                    reply = await self._give_up(store, step.failures)
                else:
                    reply = await self._redeliveries(store, step.pairs)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    async def _call(self, handler: Callable[..., Any], *args: Any) -> None:
        if inspect.iscoroutinefunction(handler):
            await handler(*args)
        else:
            await asyncio.to_thread(handler, *args)

    async def _give_up(
        self, store: Any, failures: Sequence[tuple[Timer, BaseException]]
    ) -> list[Timer]:
        ended = []
        for timer, error in failures:
            try:
                if self.on_give_up is not None:
                    await self._call(self.on_give_up, store, timer, error)
            except Exception as failed:
                self._give_up_failed(timer, failed)
            else:
                self._gave_up(store, timer, error)
                ended.append(timer)
        return ended

    async def _timers(self, store: Any, timers: Sequence[Timer]) -> Outcomes:
        gate = asyncio.Semaphore(self.settings.concurrency)
        loop = asyncio.get_running_loop()

        async def one(timer: Timer) -> BaseException | None:
            async with gate:
                watch = loop.call_later(
                    LEASE_WARNING * self.settings.lease.total_seconds(), self._lease_watch(timer)
                )
                self._starting(store, timer)
                started, error = time.monotonic(), None
                try:
                    await self._call(self.on_timer, store, timer)
                except Exception as failed:
                    error = failed
                finally:
                    watch.cancel()
                self._handled(store, timer, started, error)
                return error

        errors = await asyncio.gather(*(one(t) for t in timers))
        return _outcomes(timers, errors)

    async def _redeliveries(
        self, store: Any, pairs: Sequence[tuple[Subscription, BufferedEvent]]
    ) -> int:
        assert self.on_redelivery is not None
        done = 0
        for sub, held in pairs:
            try:
                await self._call(self.on_redelivery, store, sub, held)
                done += 1
            except Exception as failed:
                self._redelivery_failed(store, sub, failed)
        return done

    async def run(self) -> None:
        """Pass after pass until ``stop()``, SIGTERM or SIGINT; rides out server outages
        and every transient server state (``TRANSIENT``), with backoff. Between
        passes it sleeps until the next one is due or a store's waker wakes it."""
        restore = _install_signals(self.stop)
        awake = asyncio.Event()
        wakers = [
            asyncio.create_task(self._waker(index, store, awake))
            for index, store in enumerate(self.stores if self.settings.wake else ())
        ]
        try:
            while not self.stopping:
                awake.clear()  # a wake during the pass brings the next one forward
                try:
                    report = await self.run_once()
                    delay = report.sleep
                except (redis.exceptions.RedisError, LibraryMissing) as error:
                    delay = self._failed(error)
                if self._beat_due():
                    await self._beat(self._record())
                await self._sleep(self._until_beat(delay), awake)
        finally:
            for waker in wakers:
                waker.cancel()
            await asyncio.gather(*wakers, return_exceptions=True)
            await self._beat(None)  # out of the registries
            restore()

    async def _beat(self, record: dict[str, Any] | None) -> None:
        """Renews (or, with None, removes) this worker's entry in each tenant's registry,
        with what the tenant's timers did since the last beat."""
        since, self._beat_at = time.monotonic() - self._beat_at, time.monotonic()
        ttl = timedelta(seconds=self.settings.heartbeat_interval * MISSED_BEATS)
        for store in self.stores:
            mine = None if record is None else {**record, **self._recent(store.tenant, since)}
            try:
                await store.workers.heartbeat(self.worker_id, mine, ttl)
            except Exception as error:  # the passes report what is wrong
                self._beat_failed(store, error)

    async def _sleep(self, delay: float, awake: asyncio.Event) -> None:
        """Until ``delay`` passes, a waker sets ``awake``, or the worker stops (seen
        within a quarter second: ``stop`` may come from another thread)."""
        deadline = time.monotonic() + delay
        while not self.stopping and not awake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(awake.wait(), min(left, 0.25))

    async def _waker(self, index: int, store: Any, awake: asyncio.Event) -> None:
        """Blocks on the store's wake list, again and again, until cancelled."""
        failures = 0
        while not self.stopping:
            try:
                marker = await store.timers.wait_for_wake(WAKE_BLOCK_S)
            except Exception as error:  # the passes report what is wrong
                failures += 1
                await asyncio.sleep(self._waker_failed(error, failures))
                continue
            failures = 0
            if self._woken(index, marker):
                awake.set()


def _install_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM and SIGINT call ``stop`` (main thread only); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda _signum, _frame: stop())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
