"""RedisStore, and the method tables it shares with AsyncRedisStore.

Each method is declared once, as ``Op(ops.<plan>)``: the descriptor binds the
plan to the driver of the store it is read from, so ``RedisStore.events.buffer``
returns a ``bool`` and ``AsyncRedisStore.events.buffer`` an awaitable of one.
The two drivers (``drivers.py``) differ only in awaiting the client.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import redis
import redis.asyncio.retry
from redis.backoff import EqualJitterBackoff
from redis.retry import Retry

from . import codec, ops
from .drivers import (
    CLUSTER_PATIENCE_S,
    AsyncDriver,
    ServerCheck,
    SyncDriver,
    durability_mode,
    patience,
)
from .errors import InvalidInput
from .keys import Geometry, TenantKeys
from .ops import Context, Plan, make_context
from .server import hello_info

#: What ``from_url`` gives the client (a ``?socket_timeout=...`` in the URL still wins):
#: a reply that never comes is detected, and a call whose connection broke is sent
#: again, which call tokens make safe (docs/reliability.md).
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
#: How long ``timers.wait_for_wake`` blocks by default, and at most: below the socket
#: timeout ``from_url`` sets, so that a quiet wait is not taken for a lost reply.
WAKE_BLOCK_S = 5.0
MAX_WAKE_BLOCK_S = 60.0
RETRIES = 5


def is_cluster_url(url: str) -> bool:
    """Whether the server a URL names runs in cluster mode (``INFO cluster``, or
    ``HELLO``'s mode where the user may not read INFO: a tenant's user).

    Asks once, blocking, with short timeouts; a server that answers neither is taken
    for a single server.
    """
    probe = redis.Redis.from_url(
        url, socket_timeout=CONNECT_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S
    )
    try:
        try:
            return bool(int(probe.info("cluster").get("cluster_enabled", 0)))
        except redis.exceptions.NoPermissionError:
            hello = probe.execute_command("HELLO")  # type: ignore[no-untyped-call]
            return bool(hello_info(hello)["cluster_enabled"])
    except redis.exceptions.ResponseError:
        return False
    finally:
        probe.close()


def client_for_url(url: str, cluster: bool | None = None, asyncio: bool = False) -> Any:
    """The redis-py client ``from_url`` builds: ``RedisCluster`` when ``cluster`` is
    true, or when it is None and the node the URL names runs in cluster mode;
    ``Redis`` otherwise; with ``client_options``."""
    if cluster is None:
        cluster = is_cluster_url(url)
    options = client_options(asyncio=asyncio)
    if asyncio:
        kind: Any = redis.asyncio.RedisCluster if cluster else redis.asyncio.Redis
    else:
        kind = redis.RedisCluster if cluster else redis.Redis
    return kind.from_url(url, **options)


def client_options(asyncio: bool = False) -> dict[str, Any]:
    backoff = EqualJitterBackoff(cap=1.0, base=0.05)
    retry = redis.asyncio.retry.Retry(backoff, RETRIES) if asyncio else Retry(backoff, RETRIES)
    return {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "retry": retry,
        "retry_on_error": [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
    }


log = logging.getLogger("agentplane_redis")
P = ParamSpec("P")
T = TypeVar("T")


class SyncPart:
    """A namespace of a RedisStore (events, timers, runs)."""

    __slots__ = ("_driver",)

    def __init__(self, driver: SyncDriver) -> None:
        self._driver = driver


class AsyncPart:
    """A namespace of an AsyncRedisStore (events, timers, runs)."""

    __slots__ = ("_driver",)

    def __init__(self, driver: AsyncDriver) -> None:
        self._driver = driver


class Op(Generic[P, T]):
    """A store method: a plan, run by the driver of the store it is read from."""

    def __init__(self, plan: Callable[Concatenate[Context, P], Plan[T]]) -> None:
        self._plan = plan
        self.__doc__ = plan.__doc__

    @overload
    def __get__(self, obj: SyncPart, owner: type | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncPart, owner: type | None = None) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Op[P, T]: ...

    def __get__(self, obj: SyncPart | AsyncPart | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        driver = obj._driver
        made = driver.bound.get(self)  # once per store and method: every call reads it
        if made is not None:
            return made
        plan = self._plan

        @functools.wraps(plan)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return driver.call(plan, args, kwargs)

        driver.bound[self] = bound
        return bound


class EventOps:
    """``store.events``: the inbound-event store (contract section 3)."""

    __slots__ = ()
    buffer = Op(ops.buffer)
    subscribe = Op(ops.subscribe)
    claim_for = Op(ops.claim_for)
    match_waiter = Op(ops.match_waiter)
    deliver_to = Op(ops.deliver_to)
    deliver = Op(ops.deliver)
    wait = Op(ops.wait)
    unsubscribe = Op(ops.unsubscribe)
    unsubscribe_run = Op(ops.unsubscribe_run)
    park_wait = Op(ops.park_wait)
    parked_waits = Op(ops.parked_waits)
    parked_waits_page = Op(ops.parked_waits_page)
    erase_payload = Op(ops.erase_payload)
    minter = Op(ops.minter)
    sweep_unclaimed = Op(ops.sweep_unclaimed)
    dead_letters = Op(ops.dead_letters)
    dead_letters_page = Op(ops.dead_letters_page)
    live_page = Op(ops.live_page)
    waiting = Op(ops.waiting)
    waiting_page = Op(ops.waiting_page)
    purge = Op(ops.purge)
    stats = Op(ops.stats)
    oldest_live = Op(ops.oldest_live)
    lookup = Op(ops.lookup)
    lookup_wait = Op(ops.lookup_wait)
    revive = Op(ops.revive)


class TimerOps:
    """``store.timers``: the durable-timer store (contract section 4)."""

    __slots__ = ()
    arm = Op(ops.arm)
    claim_due = Op(ops.claim_due)
    disarm = Op(ops.disarm)
    disarm_many = Op(ops.disarm_many)
    disarm_run = Op(ops.disarm_run)
    pending_count = Op(ops.pending_count)
    pending = Op(ops.pending)
    pending_page = Op(ops.pending_page)
    stats = Op(ops.timer_stats)
    armed = Op(ops.armed)
    next_due = Op(ops.next_due)
    lookup = Op(ops.lookup_timer)
    next_claim_in = Op(ops.next_claim_in)
    reschedule = Op(ops.reschedule)


class RunOps:
    """``store.runs``: sealing and closing runs (contract section 5)."""

    __slots__ = ()
    seal = Op(ops.seal)
    is_sealed = Op(ops.is_sealed)
    close = Op(ops.close)
    lookup = Op(ops.lookup_run)


class WorkerOps:
    """``store.workers``: the tenant's registry of running workers, kept by their
    heartbeats (``agentplane-redis workers``)."""

    __slots__ = ()
    heartbeat = Op(ops.heartbeat)
    running = Op(ops.running_workers)


class Workers(WorkerOps, SyncPart):
    __slots__ = ()


class AsyncWorkers(WorkerOps, AsyncPart):
    __slots__ = ()


class Events(EventOps, SyncPart):
    __slots__ = ()


def _wake_args(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidInput("timeout must be a number of seconds")
    if not 0 < timeout <= MAX_WAKE_BLOCK_S:
        raise InvalidInput(f"timeout must be above 0 and at most {MAX_WAKE_BLOCK_S:g} seconds")
    return float(timeout)


def _marker(reply: Any) -> str | None:
    return None if reply is None else codec.text(reply[1])


class Timers(TimerOps, SyncPart):
    __slots__ = ()

    def wait_for_wake(self, timeout: float = WAKE_BLOCK_S) -> str | None:
        """Blocks on the server, on a connection of the client's pool, until a
        writer wakes one worker of the tenant or ``timeout`` seconds pass: "t"
        when a timer was armed sooner than every timer armed before it (a sleep
        planned until the next due timer is too long), "r" when a wait was parked
        for redelivery; None at the timeout. One marker wakes one waiter; a
        marker pushed while nobody waits is kept (the two newest) for the next.
        Keep ``timeout`` below the client's socket timeout."""
        seconds = _wake_args(timeout)
        return _marker(self._driver.client.blpop([self._driver.ctx.keys.key("wake")], seconds))


class Runs(RunOps, SyncPart):
    __slots__ = ()


class AsyncEvents(EventOps, AsyncPart):
    __slots__ = ()


class AsyncTimers(TimerOps, AsyncPart):
    __slots__ = ()

    async def wait_for_wake(self, timeout: float = WAKE_BLOCK_S) -> str | None:
        """As ``RedisStore.timers.wait_for_wake``, awaited."""
        seconds = _wake_args(timeout)
        key = self._driver.ctx.keys.key("wake")
        return _marker(await self._driver.client.blpop([key], seconds))


class AsyncRuns(RunOps, AsyncPart):
    __slots__ = ()


D = TypeVar("D", SyncDriver, AsyncDriver)
EventsT = TypeVar("EventsT", Events, AsyncEvents)
TimersT = TypeVar("TimersT", Timers, AsyncTimers)
RunsT = TypeVar("RunsT", Runs, AsyncRuns)


class StoreBase(Generic[D, EventsT, TimersT, RunsT]):
    """The one constructor of both stores: validated options, a driver, three namespaces."""

    _driver_class: type[D]
    _part_classes: tuple[Callable[[D], EventsT], Callable[[D], TimersT], Callable[[D], RunsT]]

    def __init__(
        self,
        client: Any,
        *,
        tenant: str = "default",
        clock: str = "server",
        timer_lease: object = None,
        max_payload_bytes: int = ops.DEFAULT_MAX_PAYLOAD,
        max_correlation_keys: int = codec.DEFAULT_MAX_KEYS,
        durability: str = "fast",
        cluster_patience: float = CLUSTER_PATIENCE_S,
        functions: bool = True,
    ) -> None:
        ctx = make_context(tenant, clock, timer_lease, max_payload_bytes, max_correlation_keys)
        if not isinstance(functions, bool):
            raise InvalidInput(f"functions must be True or False, not {functions!r}")
        self._driver: D = self._driver_class(
            client, ctx, durability_mode(durability), patience(cluster_patience), functions
        )
        events, timers, runs = self._part_classes
        self.events: EventsT = events(self._driver)
        self.timers: TimersT = timers(self._driver)
        self.runs: RunsT = runs(self._driver)
        self.workers: Any = (Workers if isinstance(self._driver, SyncDriver) else AsyncWorkers)(
            self._driver
        )

    @property
    def tenant(self) -> str:
        """The tenant this store serves (trimmed)."""
        return self._driver.ctx.keys.tenant

    @property
    def geometry(self) -> Geometry:
        """The timer buckets' geometry as this store last learned it from the server
        (each call with a bucket key learns it afresh when the buckets split)."""
        return self._driver.ctx.geometry

    @property
    def key_geometry(self) -> Geometry:
        """The key buckets' geometry as this store last learned it from the server
        (a call answered ``NEED`` learns it afresh)."""
        return self._driver.ctx.key_geometry

    @property
    def wait_geometry(self) -> Geometry:
        """The wait buckets' geometry as this store last learned it from the server
        (a call answered ``NEED`` learns it afresh)."""
        return self._driver.ctx.wait_geometry

    @property
    def keys(self) -> TenantKeys:
        """The tenant's key names (for operators and tests)."""
        return self._driver.ctx.keys

    @property
    def client(self) -> Any:
        """The redis-py client the store runs on."""
        return self._driver.client

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tenant={self.tenant!r})"


class RedisStore(StoreBase[SyncDriver, Events, Timers, Runs]):
    """The event, timer and run stores of one tenant, over a redis-py client.

    Any client works: ``redis.Redis``, ``redis.RedisCluster`` or fakeredis.
    Options: ``tenant``, ``clock`` ("server" or "client"), ``timer_lease``,
    ``max_payload_bytes``, ``max_correlation_keys`` (per event or wait, default 64),
    ``durability`` ("fast" or "acknowledged"),
    ``cluster_patience`` (seconds), ``functions`` (False: send scripts instead
    of calling the Functions library).
    """

    _driver_class = SyncDriver
    _part_classes = (Events, Timers, Runs)

    def check(self) -> ServerCheck:
        """Reads the server's INFO again and checks it as at construction: refuses an
        ``allkeys-*`` eviction policy (``ServerMisconfigured``), a Functions library
        whose code is not this release's (``LibraryMismatch``; compared again now)
        and, with ``durability="acknowledged"``, a server that cannot confirm
        (``DurabilityNotConfirmed``)."""
        self._driver.server = self._driver.check()
        return self._driver.server

    @classmethod
    def from_url(cls, url: str, *, cluster: bool | None = None, **options: Any) -> RedisStore:
        """A store over a client for ``url`` with timeouts and retries
        (``client_options``); options as for the constructor.

        The client is ``redis.RedisCluster`` when the node the URL names runs in
        cluster mode (asked once with ``INFO cluster``), ``redis.Redis`` otherwise;
        ``cluster=True`` or ``False`` decides without asking (``client_for_url``).
        """
        return cls(client_for_url(url, cluster), **options)

    def close_connection(self) -> None:
        """Acknowledge the replies of the calls this store received (so the server
        forgets them; best effort), then close the client's connections."""
        try:
            self._driver.acknowledge()
        except redis.exceptions.RedisError as error:
            log.debug("replies not acknowledged on close: %s", error)
        self._driver.client.close()

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_connection()
