"""Drivers run plans: each script call goes to the client, each reply back to the plan.

**Sending.** A call is ``FCALL`` of the operation's function in the package's
Functions library (``scripts.library()``), reached through the ladder that
``server.py`` plans (verify the library, load it where missing, fall back to
scripts where the user may, raise ``LibraryMissing`` or ``LibraryMismatch``
where it cannot), with the client's decoding turned off for its reply
(``NEVER_DECODE``), so a client made with ``decode_responses=True`` gets the
same replies, and bytes that are not UTF-8 reach the codec, which reports them
as ``CorruptRow``. ``functions=False`` sends scripts from the start. An error
the server raised inside a script keeps the class its code gives it
(``OutOfMemoryError``, ``ReadOnlyError``, ``ServerBusy``, ...).

**The wire.** On a plain, pooled ``redis.Redis`` (or ``redis.asyncio.Redis``) the
driver packs its calls itself and sends them on the client's own pool with the
client's own retries (``wire.py``): the same commands and retries, less client
time per call (``benchmarks/call_time.py`` measures it).

**Lost replies.** A writing call carries a call token: one of the store's lanes,
which carries one call at a time, and the call's number on it (``_Lanes``). The
script remembers its reply in the lane's field, so re-sending the call, as
redis-py's own retries do, answers what its first execution did, and the lane's
next call replaces the reply: nothing is left to acknowledge but the lanes of a
closing store. When the client gives up (a connection error or timeout while a
write was in flight), the driver keeps the unfinished plan, its lane with it,
and raises ``OutcomeUnknown``; calling the same method again with the same
arguments resumes that plan with the same token, so the caller finally gets
the first execution's answer.

**Durability.** With ``durability="acknowledged"`` a writing call is sent in one
pipeline with ``WAITAOF`` (or ``WAIT`` on Redis 7.0), so the confirmation covers
the connection that ran the script. A pipeline whose call found no function
(or no script) is sent again after loading it; nothing in it ran.

**The server check.** Before its first call the store reads ``INFO`` once (``HELLO``
where its user may not read INFO) and verifies the library (``server.py``): it
refuses an ``allkeys-*`` eviction policy (eviction would silently drop rows)
and plans the confirmation of acknowledged writes.

**Clusters.** A tenant's keys share one hash tag, so all of a store's calls go
to one slot, served by one master: its *owner*. The server check reads the
owner's ``INFO``. An acknowledged write's pipeline runs on the owner's own
connection, and its confirmation is planned per owner, so after a failover it
is planned again for the promoted replica. While the cluster moves the slot
(``TRYAGAIN``, ``ASK``, ``MOVED``) or fails its master over (connection
errors, ``CLUSTERDOWN``), a call is sent again with a growing pause (none
after ``MOVED``, which names the new owner), for up to the
store's ``cluster_patience`` seconds: none of those ran the call, or the call
token answers what it did. A write still unanswered then raises
``OutcomeUnknown``. Each call names the owner as its target (redis-py would
otherwise ask the server for an ``FCALL``'s keys, a round trip per call), and
redis-py does not re-send a call with a named target: on a cluster this loop
is what re-sends after a lost reply.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterError,
    ConnectionError,
    MovedError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from . import codec
from .errors import InvalidInput, OutcomeUnknown, ServerBusy
from .ops import Call, Context, Plan, acknowledgement
from .scripts import LuaLibrary, LuaScript, catalogue, library
from .server import (
    Climb,
    Confirmation,
    Ladder,
    Send,
    ServerCheck,
    inspect_server,
    plan_confirmation,
    read_info,
    shared_verifications,
)
from .wire import AsyncWire, Wire, async_wire_for, wire_for

try:
    from redis._parsers.base import BaseParser
except ImportError:  # pragma: no cover - older redis-py layouts
    from redis.connection import BaseParser  # type: ignore[attr-defined]

T = TypeVar("T")
log = logging.getLogger("agentplane_redis")

#: Errors after which a write that was sent may or may not have run.
LOST_REPLY = (ConnectionError, TimeoutError)
#: Lanes one acknowledging call (a closing store's) names, at most.
ACK_CHUNK = 256
#: Unfinished plans kept for a call again, per store; the oldest is dropped.
MAX_SUSPENDED = 64
#: How long a call on a cluster keeps trying while its slot moves or fails over, in s.
CLUSTER_PATIENCE_S = 30.0
#: What a cluster answers while it moves a slot or fails a master over. None of them
#: means the call ran; a connection error may hide that it did, which its token covers.
CLUSTER_MOVING = (
    AskError,  # MOVED and ASK
    TryAgainError,
    ClusterError,  # CLUSTERDOWN, and redis-py's "TTL exhausted"
    RedisClusterException,  # a slot with no known owner
    ConnectionError,
    TimeoutError,
)
#: Errors after which a cluster's topology is read again before the next try.
CLUSTER_REROUTE = (ClusterError, RedisClusterException, ConnectionError, TimeoutError)
#: Replies of script calls are never decoded by the client (see the module's doc).
_RAW = {NEVER_DECODE: True}

#: A call's arguments after the script, to send when a call is sent again; None:
#: the same as the first time.
Tail = tuple[Any, ...] | None

#: Leads the call's number on its lane in its first send: the script does not look
#: for a reply remembered for it, which none can be (``lua/_lib/core.lua``).
FIRST_SEND = "+"

#: A writing call's token: its lane and its number on the lane.
Ticket = tuple[str, str]
#: The numbers of writing calls in this process: a lane's only grow.
_NUMBERS = itertools.count(1)


class _Lanes:
    """The lanes of one store's writing calls (``lua/_lib/core.lua``). A call takes
    a lane before its first send and gives it back once its reply has arrived, so
    each lane carries one call at a time and the server keeps one remembered reply
    per lane, which the lane's next call replaces. A call whose reply was lost
    keeps its lane while it waits for a call again, and one given up never gives
    it back, so no later call's reply can be taken for its. Each call takes the
    next number of the process, after its lane: a lane's numbers only grow, and
    the script refuses a stale copy of a call whose lane has gone on."""

    __slots__ = ("_free", "_pid")

    def __init__(self) -> None:
        self._free: list[str] = []
        self._pid = os.getpid()

    def take(self) -> Ticket:
        if self._pid != os.getpid():  # a forked child draws lanes of its own
            self._free, self._pid = [], os.getpid()
        try:
            lane = self._free.pop()
        except IndexError:  # a new lane: 64 random bits, as hex
            lane = os.urandom(8).hex()
        return lane, str(next(_NUMBERS))

    def give(self, ticket: Ticket) -> None:
        self._free.append(ticket[0])

    def received(self) -> list[str]:
        """The lanes whose calls have all been answered, taken out of use (a
        closing store's, which forgets their replies)."""
        if self._pid != os.getpid():
            return []
        lanes, self._free = self._free, []
        return lanes


class _Sends:
    """The arguments of each send of one call: ``tail`` the first time, ``again``
    (where given) every time after, whatever came back: a send after a reply was
    lost (a retry, or the ladder's next step once the retry found the library
    flushed) may follow an execution."""

    __slots__ = ("again", "tail")

    def __init__(self, tail: tuple[Any, ...], again: Tail) -> None:
        self.tail, self.again = tail, again

    def next(self) -> tuple[Any, ...]:
        tail = self.tail
        if self.again is not None:
            self.tail = self.again
        return tail


def first_send(tail: tuple[Any, ...]) -> tuple[Any, ...]:
    """A writing call's arguments (``_command``'s) as its first send: its number
    on its lane, last, marked with ``FIRST_SEND``."""
    return (*tail[:-1], FIRST_SEND + tail[-1])


__all__ = ["ServerCheck", "plan_confirmation"]  # re-exported: their home is server.py


def durability_mode(value: object) -> str:
    if value not in ("fast", "acknowledged"):
        raise InvalidInput('durability must be "fast" or "acknowledged"')
    return str(value)


def patience(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 3600:
        raise InvalidInput("cluster_patience must be a number of seconds in [0, 3600)")
    return float(value)


def is_cluster(client: object) -> bool:
    """Whether a client is one of redis-py's cluster clients (sync or asyncio)."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def pauses(seconds: float) -> Iterator[float | None]:
    """The pauses between tries on a moving cluster: 10 ms doubling to 250 ms, for
    ``seconds`` in all; ``None`` once the time is up (give up)."""
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            yield None
            return
        yield min(pause, left)
        pause = min(pause * 2, 0.25)


def server_error(error: Exception) -> Exception:
    """An error raised inside a script, with the class its code gives it.

    Redis reports a command's error inside a script as ``ERR <CODE> ...``, so
    redis-py sees a plain ``ResponseError``; its own table maps the code again.
    ``BUSY`` (a long script runs; nothing else does) is not in that table.
    """
    if type(error) is ResponseError:
        if str(error).startswith("BUSY "):
            return ServerBusy(str(error))
        mapped: Exception = BaseParser.parse_error(str(error))  # type: ignore[no-untyped-call]
        if type(mapped) is not ResponseError:
            return mapped
    return error


def _raise_server_error(error: Exception) -> None:
    mapped = server_error(error)
    if mapped is error:
        raise error
    raise mapped from error


def settle(confirmation: Confirmation, reply: Any, ack: Any) -> Any:
    """The script's reply from a pipeline ``[call, confirmation]``, confirmed."""
    if isinstance(reply, Exception):
        _raise_server_error(reply)
    confirmation.check(ack)
    return reply


@dataclass(slots=True)
class _Suspended:
    """A plan whose last call's reply was lost, kept for a call again."""

    op: Callable[..., Plan[Any]]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    plan: Plan[Any]
    call: Call
    ticket: Ticket | None

    def same(self, op: Callable[..., Plan[Any]], args: Sequence[Any], kwargs: Any) -> bool:
        try:
            return self.op is op and self.args == args and self.kwargs == kwargs
        except Exception:  # arguments that cannot be compared are not the same call
            return False


class _Driver:
    def __init__(
        self,
        client: Any,
        ctx: Context,
        durability: str,
        cluster_patience: float,
        functions: bool,
    ) -> None:
        self.client = client
        self.ctx = ctx
        self.durability = durability
        self.server: ServerCheck | None = None
        self.cluster = is_cluster(client)
        self.patience = cluster_patience
        #: The tenant's one slot (every key has the tenant's hash tag).
        self.slot = key_slot(ctx.keys.key("events").encode())
        #: On a cluster: the confirmation planned for each owner the slot had.
        self._confirmations: dict[str, Confirmation | None] = {}
        #: Errors after which a write's outcome is unknown.
        self.lost_reply = LOST_REPLY + CLUSTER_MOVING if self.cluster else LOST_REPLY
        self.scripts: dict[str, LuaScript] = dict(catalogue())
        #: How calls reach their functions (``server.py``).
        pool = client if self.cluster else getattr(client, "connection_pool", client)
        self.ladder = Ladder(library() if functions else None, shared=shared_verifications(pool))
        self._lanes = _Lanes()
        self._suspended: list[_Suspended] = []
        self._lock = threading.Lock()
        #: The store's methods bound to this driver, by descriptor (``store.Op``).
        self.bound: dict[object, Callable[..., Any]] = {}

    @property
    def library(self) -> LuaLibrary | None:
        """The library the calls use; None while they send scripts instead."""
        return self.ladder.library

    @property
    def confirmation(self) -> Confirmation | None:
        return self.server.confirmation if self.server else None

    def _moving(self, error: Exception, pause: float | None) -> tuple[bool, float]:
        """After a cluster's moving error: whether to read the slot map again, and how
        long to pause (none after MOVED, which names the new owner). Raises it again
        once the patience is used up."""
        if pause is None:
            raise error
        self._confirmations.clear()
        moved = type(error) is MovedError
        return moved or isinstance(error, CLUSTER_REROUTE), 0.0 if moved else pause

    def owner_name(self) -> str:
        """On a cluster: the ``host:port`` of the master serving the tenant's slot."""
        return str(self.client.nodes_manager.get_node_from_slot(self.slot).name)

    def where(self) -> str:
        """Where calls go, as the ladder names it: "" or the owner's ``host:port``."""
        return self.owner_name() if self.cluster else ""

    def _options(self) -> dict[Any, Any]:
        """The options of a call through ``execute_command``: replies undecoded, and
        on a cluster routed to the slot's owner without asking for its keys."""
        if not self.cluster:
            return _RAW
        return {**_RAW, "target_nodes": self.client.nodes_manager.get_node_from_slot(self.slot)}

    def _confirms(self, call: Call) -> bool:
        return self.durability == "acknowledged" and call.writes

    @staticmethod
    def _command(call: Call, ticket: Ticket | None = None) -> tuple[Any, ...]:
        """The arguments after the script: key count, keys, args, then for a write its
        token, the lane and the number on it (last, so that the script reads its
        arguments where they arrive, without copying them)."""
        tail = ticket if ticket is not None else ()
        return (len(call.keys), *call.keys, *call.args, *tail)

    def _acknowledgements(self) -> list[tuple[Any, ...]]:
        """The calls that forget the replies of every lane whose calls were answered
        (a closing store's): ``acknowledge`` with the lane "", which remembers
        nothing."""
        lanes = self._lanes.received()
        keys = acknowledgement(self.ctx).keys
        return [
            (len(keys), *keys, *lanes[i : i + ACK_CHUNK], "", "")
            for i in range(0, len(lanes), ACK_CHUNK)
        ]

    @staticmethod
    def _received(call: Call, reply: Any) -> Any:
        """A call's reply, as the list it stands for."""
        return codec.reply_list(reply)

    def _answered(self, ticket: Ticket | None) -> None:
        """A write's reply (or error) arrived: its lane is free for the next call."""
        if ticket is not None:
            self._lanes.give(ticket)

    def _ticket(self, call: Call, ticket: Ticket | None) -> Ticket | None:
        """The token of a call about to be sent: a resumed call's own, a new one for
        a write, none for a read."""
        if ticket is None and call.writes:
            return self._lanes.take()
        return ticket

    @staticmethod
    def _confirmed_pipeline(
        target: Any, confirmation: Confirmation, step: Send, tail: tuple[Any, ...]
    ) -> Any:
        """A pipeline of the call and its confirmation, on one connection."""
        pipe = target.pipeline(transaction=False)
        pipe.execute_command(*step.head, *tail, **_RAW)
        pipe.execute_command(*confirmation.command)
        return pipe

    def _checked(self, info: dict[str, Any] | None) -> ServerCheck:
        server = inspect_server(info, self.durability)
        if self.cluster:
            owner = self.owner_name()
            self._confirmations = {owner: server.confirmation}
            server = dataclasses.replace(server, node=owner)
        return server

    def _with_library(self, server: ServerCheck) -> ServerCheck:
        lib = self.ladder.library
        verified = lib is not None and self.where() in self.ladder.verified
        return dataclasses.replace(server, library=lib.name if verified and lib else None)

    def _probe(self) -> Call:
        """A read that shows, at start-up, whether calls reach their function or
        script at all (``LibraryMissing`` for a tenant's user without the library)."""
        return self.ctx.call("pending_count", [])

    def _start(
        self, op: Callable[..., Plan[T]], args: Any, kwargs: Any
    ) -> tuple[Plan[T], Call | None, Ticket | None]:
        """A new plan for the call, or the one a lost reply left for the same call,
        with that call and its token."""
        entry = self._resume(op, args, kwargs)
        if entry is None:
            return op(self.ctx, *args, **kwargs), None, None
        return entry.plan, entry.call, entry.ticket

    def _resume(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> _Suspended | None:
        if not self._suspended:  # the usual case, read without the lock
            return None
        with self._lock:
            for i, entry in enumerate(self._suspended):
                if entry.same(op, args, kwargs):
                    return self._suspended.pop(i)
        return None

    def _suspend(self, entry: _Suspended) -> None:
        with self._lock:
            self._suspended.append(entry)
            dropped = self._suspended[:-MAX_SUSPENDED]
            del self._suspended[:-MAX_SUSPENDED]
        for old in dropped:
            old.plan.close()

    def _lost(self, entry: _Suspended, error: Exception) -> OutcomeUnknown:
        self._suspend(entry)
        return OutcomeUnknown(
            f"{entry.call.script}: the reply was lost ({error}); the write may or may not have"
            f" run. Call {entry.op.__name__} again with the same arguments for its answer."
        )


class SyncDriver(_Driver):
    def __init__(
        self,
        client: Any,
        ctx: Context,
        durability: str,
        cluster_patience: float = CLUSTER_PATIENCE_S,
        functions: bool = True,
    ) -> None:
        if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
            raise InvalidInput("RedisStore needs a synchronous client; use AsyncRedisStore")
        super().__init__(client, ctx, durability, cluster_patience, functions)
        #: Where calls go packed by the store (``wire.py``); None: through execute_command.
        self._wire = None if self.cluster else wire_for(client)
        #: On a cluster, a wire on the own client of each master that has served the
        #: slot, by name (None where that client is not a plain pooled one).
        self._node_wires: dict[str, Wire | None] = {}
        self.server = self.check(again=False)

    def _owner(self) -> tuple[str, Any]:
        """On a cluster: the name and plain client of the master serving the slot."""
        node = self.client.nodes_manager.get_node_from_slot(self.slot)
        return node.name, self.client.get_redis_connection(node)

    def _admin_target(self) -> Any:
        """Where the ladder's own commands go: the client, or the owner's plain client."""
        return self._owner()[1] if self.cluster else self.client

    @staticmethod
    def _climb(steps: Climb, target: Any, send: Callable[[Send], Any] | None = None) -> Any:
        """Runs a ladder: each Send on ``target`` (a call's through ``send``), each
        reply or ResponseError back to it, until it returns."""
        try:
            step = next(steps)
        except StopIteration as done:  # nothing to send
            return done.value
        while True:
            try:
                reply = send(step) if send and step.call else target.execute_command(*step.head)
            except ResponseError as error:
                reply = error
            try:
                step = steps.send(reply)
            except StopIteration as done:
                return done.value

    def check(self, again: bool = True) -> ServerCheck:
        """Reads the server's INFO and verifies the library (``again``: even where
        another store over the same client did so lately)."""
        target = self._admin_target()
        server = self._checked(self._climb(read_info(), target))
        if self.ladder.library is not None:
            self._climb(self.ladder.verify(self.where(), again), target)
            if self.ladder.library is not None and self.where() not in self.ladder.verified:
                self._eval(self.scripts["pending_count"], self._command(self._probe()))
        return self._with_library(server)

    def _target(self) -> tuple[Any, Confirmation]:
        """Where an acknowledged write goes, and how it is confirmed there."""
        if not self.cluster:
            assert self.confirmation is not None
            return self.client, self.confirmation
        name, owner = self._owner()
        if name not in self._confirmations:
            planned = inspect_server(self._climb(read_info(), owner), self.durability)
            self._confirmations[name] = planned.confirmation
        confirmation = self._confirmations[name]
        assert confirmation is not None
        return owner, confirmation

    def _owner_wire(self) -> Wire | None:
        """On a cluster: a wire on the own client of the master serving the slot."""
        name, owner = self._owner()
        if name not in self._node_wires:
            self._node_wires[name] = wire_for(owner)
        return self._node_wires[name]

    def _run(
        self,
        step: Send,
        tail: tuple[Any, ...],
        options: dict[Any, Any],
        again: Tail = None,
        wire: Wire | None = None,
    ) -> Any:
        if wire is not None:
            return wire.call(step.head, tail, again)
        return self.client.execute_command(*step.head, *tail, **options)

    def _eval(
        self,
        script: LuaScript,
        tail: tuple[Any, ...],
        again: Tail = None,
        wire: Wire | None = None,
    ) -> Any:
        """The call on ``wire``, or the client's own (None on a cluster: then through
        execute_command, unless a wire is given)."""
        wire = wire or self._wire
        options = {} if wire is not None else self._options()
        sends = _Sends(tail, again)
        try:
            return self._climb(
                self.ladder.call(self.where(), script),
                self._admin_target(),
                lambda step: self._run(step, sends.next(), options, again, wire),
            )
        except ResponseError as error:
            _raise_server_error(error)

    def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        target, confirmation = self._target()
        acks: list[Any] = []

        def confirmed(step: Send) -> Any:
            reply, ack = self._confirmed_pipeline(target, confirmation, step, tail).execute(
                raise_on_error=False
            )
            acks.append(ack)
            return reply

        try:
            reply = self._climb(self.ladder.call(self.where(), script), target, confirmed)
        except ResponseError as error:
            reply = error
        return settle(confirmation, reply, acks[-1] if acks else None)

    def _send(self, script: LuaScript, tail: tuple[Any, ...], confirms: bool) -> Any:
        if confirms:
            return self._eval_confirmed(script, tail)
        return self._eval(script, tail)

    def _send_first(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        """A call's first send on the wire, marked so (``first_send``); redis-py
        re-sends it unmarked, as does a cluster's next try."""
        if self.cluster:
            return self._send_on_cluster(script, tail, False, marked=True)
        return self._eval(script, first_send(tail), again=tail)

    def _send_on_cluster(
        self, script: LuaScript, tail: tuple[Any, ...], confirms: bool, marked: bool = False
    ) -> Any:
        """The call on the slot owner: its first try on the owner's wire (``marked``:
        as a first send), where the call is not confirmed and the owner's client
        takes one; every later try through ``RedisCluster``, which follows an ASK
        or a MOVED and retries a lost connection on its own, unmarked."""
        wired = not confirms
        for pause in pauses(self.patience):
            try:
                wire = self._owner_wire() if wired else None
                wired = False
                if wire is not None:
                    if marked:
                        return self._eval(script, first_send(tail), again=tail, wire=wire)
                    return self._eval(script, tail, wire=wire)
                return self._send(script, tail, confirms)
            except AuthenticationError:
                raise
            except CLUSTER_MOVING as moving:
                reroute, wait = self._moving(moving, pause)
                if reroute:
                    try:
                        self.client.nodes_manager.initialize()
                    except (RedisError, RedisClusterException) as unreachable:
                        log.debug("cluster topology not read: %s", unreachable)
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def acknowledge(self) -> None:
        """Forgets, on the server, the replies of every call this store received."""
        send = self._send_on_cluster if self.cluster else self._send
        for tail in self._acknowledgements():
            send(self.scripts["acknowledge"], tail, False)

    def execute(self, call: Call, first: bool = False, ticket: Ticket | None = None) -> Any:
        """Runs one call; ``first``: its first send (not a lost call's again);
        ``ticket``: a write's token (a one-off call's write takes a lane of its own)."""
        own = ticket is None and call.writes
        ticket = self._ticket(call, ticket)
        tail = self._command(call, ticket)
        script = self.scripts[call.script]
        confirms = self._confirms(call)
        wired = self.cluster or self._wire is not None
        if first and ticket is not None and wired and not confirms:
            reply = self._send_first(script, tail)
        else:
            send = self._send_on_cluster if self.cluster else self._send
            reply = send(script, tail, confirms)
        if own:
            self._answered(ticket)
        return self._received(call, reply)

    def call(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> T:
        """Runs the plan of ``op(ctx, *args, **kwargs)``, or resumes the one a lost
        reply left unfinished for the same call."""
        plan, call, ticket = self._start(op, args, kwargs)
        kept, first = False, call is None
        try:
            if call is None:
                call = next(plan)
            while True:
                ticket = self._ticket(call, ticket)
                try:
                    reply = self.execute(call, first, ticket)
                except self.lost_reply as lost:
                    if ticket is None:
                        raise
                    kept = True
                    entry = _Suspended(op, args, kwargs, plan, call, ticket)
                    raise self._lost(entry, lost) from lost
                except Exception:
                    self._answered(ticket)  # with an error
                    raise
                self._answered(ticket)
                ticket = None
                call, first = plan.send(reply), True
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            if not kept:
                plan.close()  # an unfinished plan (an error) is closed


def _cancel_requested() -> bool:
    """Whether the current task was asked to cancel (Python 3.11 and on can tell)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling and cancelling())


#: Keyword arguments of an asyncio cluster node that a plain connection pool refuses.
_NODE_ONLY = ("oss_cluster_maint_notifications_handler",)


class AsyncDriver(_Driver):
    def __init__(
        self,
        client: Any,
        ctx: Context,
        durability: str,
        cluster_patience: float = CLUSTER_PATIENCE_S,
        functions: bool = True,
    ) -> None:
        if not inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
            raise InvalidInput(
                "AsyncRedisStore needs an asyncio client (redis.asyncio); use RedisStore"
            )
        super().__init__(client, ctx, durability, cluster_patience, functions)
        #: On a cluster: plain clients of the masters the slot had (acknowledged writes).
        self._owners: dict[str, Any] = {}
        #: Where calls go packed by the store (``wire.py``); None: through execute_command.
        self._wire = None if self.cluster else async_wire_for(client)
        #: On a cluster, a wire on the store's own client of each master that has
        #: served the slot, by name.
        self._node_wires: dict[str, AsyncWire | None] = {}

    def _owner(self) -> tuple[str, Any]:
        """On a cluster: the name and a plain client of the master serving the slot."""
        node = self.client.nodes_manager.get_node_from_slot(self.slot)
        return node.name, self._plain(node)

    def _plain(self, node: Any) -> Any:
        """The store's own plain client of a cluster node."""
        plain = self._owners.get(node.name)
        if plain is None:
            kwargs = {k: v for k, v in node.connection_kwargs.items() if k not in _NODE_ONLY}
            pool = redis.asyncio.ConnectionPool(connection_class=node.connection_class, **kwargs)
            plain = self._owners[node.name] = redis.asyncio.Redis.from_pool(pool)
        return plain

    async def close(self) -> None:
        """Closes the plain clients of the cluster's masters (the store's own)."""
        owners, self._owners, self._node_wires = self._owners, {}, {}
        for plain in owners.values():
            await plain.aclose()

    def _admin_target(self) -> Any:
        """Where the ladder's own commands go: the client, or the owner's plain client."""
        return self._owner()[1] if self.cluster else self.client

    @staticmethod
    async def _climb(
        steps: Climb, target: Any, send: Callable[[Send], Awaitable[Any]] | None = None
    ) -> Any:
        """Runs a ladder (see SyncDriver._climb), awaiting each Send."""
        try:
            step = next(steps)
        except StopIteration as done:  # nothing to send
            return done.value
        while True:
            try:
                if send and step.call:
                    reply = await send(step)
                else:
                    reply = await target.execute_command(*step.head)
            except ResponseError as error:
                reply = error
            try:
                step = steps.send(reply)
            except StopIteration as done:
                return done.value

    async def check(self, again: bool = True) -> ServerCheck:
        """Reads the server's INFO and verifies the library (``again``: even where
        another store over the same client did so lately)."""
        if self.cluster:
            await self.client.initialize()
        target = self._admin_target()
        self.server = self._checked(await self._climb(read_info(), target))
        if self.ladder.library is not None:
            await self._climb(self.ladder.verify(self.where(), again), target)
            if self.ladder.library is not None and self.where() not in self.ladder.verified:
                await self._eval(self.scripts["pending_count"], self._command(self._probe()))
        self.server = self._with_library(self.server)
        return self.server

    async def _target(self) -> tuple[Any, Confirmation]:
        """Where an acknowledged write goes, and how it is confirmed there."""
        if not self.cluster:
            assert self.confirmation is not None
            return self.client, self.confirmation
        name, owner = self._owner()
        if name not in self._confirmations:
            planned = inspect_server(await self._climb(read_info(), owner), self.durability)
            self._confirmations[name] = planned.confirmation
        confirmation = self._confirmations[name]
        assert confirmation is not None
        return owner, confirmation

    def _owner_wire(self) -> AsyncWire | None:
        """On a cluster: a wire on the store's own client of the slot's master."""
        name, owner = self._owner()
        if name not in self._node_wires:
            self._node_wires[name] = async_wire_for(owner)
        return self._node_wires[name]

    async def _run(
        self,
        step: Send,
        tail: tuple[Any, ...],
        options: dict[Any, Any],
        again: Tail = None,
        wire: AsyncWire | None = None,
    ) -> Any:
        if wire is not None:
            return await wire.call(step.head, tail, again)
        return await self.client.execute_command(*step.head, *tail, **options)

    async def _eval(
        self,
        script: LuaScript,
        tail: tuple[Any, ...],
        again: Tail = None,
        wire: AsyncWire | None = None,
    ) -> Any:
        """The call on ``wire``, or the client's own (see SyncDriver._eval)."""
        wire = wire or self._wire
        options = {} if wire is not None else self._options()
        sends = _Sends(tail, again)
        try:
            return await self._climb(
                self.ladder.call(self.where(), script),
                self._admin_target(),
                lambda step: self._run(step, sends.next(), options, again, wire),
            )
        except ResponseError as error:
            _raise_server_error(error)

    async def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        target, confirmation = await self._target()
        acks: list[Any] = []

        async def confirmed(step: Send) -> Any:
            pipe = self._confirmed_pipeline(target, confirmation, step, tail)
            reply, ack = await pipe.execute(raise_on_error=False)
            acks.append(ack)
            return reply

        try:
            reply = await self._climb(self.ladder.call(self.where(), script), target, confirmed)
        except ResponseError as error:
            reply = error
        return settle(confirmation, reply, acks[-1] if acks else None)

    async def _send(self, script: LuaScript, tail: tuple[Any, ...], confirms: bool) -> Any:
        if confirms:
            return await self._eval_confirmed(script, tail)
        return await self._eval(script, tail)

    async def _send_first(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        """A call's first send on the wire, marked so (``first_send``); redis-py
        re-sends it unmarked, as does a cluster's next try."""
        if self.cluster:
            return await self._send_on_cluster(script, tail, False, marked=True)
        return await self._eval(script, first_send(tail), again=tail)

    async def _send_on_cluster(
        self, script: LuaScript, tail: tuple[Any, ...], confirms: bool, marked: bool = False
    ) -> Any:
        """The call on the slot owner (see SyncDriver._send_on_cluster)."""
        wired = not confirms
        for pause in pauses(self.patience):
            try:
                wire = self._owner_wire() if wired else None
                wired = False
                if wire is not None:
                    if marked:
                        return await self._eval(script, first_send(tail), again=tail, wire=wire)
                    return await self._eval(script, tail, wire=wire)
                return await self._send(script, tail, confirms)
            except AuthenticationError:
                raise
            except CLUSTER_MOVING as moving:
                reroute, wait = self._moving(moving, pause)
                if reroute:
                    try:
                        await self.client.nodes_manager.initialize()
                    except (RedisError, RedisClusterException) as unreachable:
                        log.debug("cluster topology not read: %s", unreachable)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def acknowledge(self) -> None:
        """Forgets, on the server, the replies of every call this store received."""
        send = self._send_on_cluster if self.cluster else self._send
        for tail in self._acknowledgements():
            await send(self.scripts["acknowledge"], tail, False)

    async def execute(self, call: Call, first: bool = False, ticket: Ticket | None = None) -> Any:
        """Runs one call; ``first``: its first send (not a lost call's again);
        ``ticket``: a write's token (a one-off call's write takes a lane of its own)."""
        if self.server is None:
            await self.check(again=False)
        own = ticket is None and call.writes
        ticket = self._ticket(call, ticket)
        tail = self._command(call, ticket)
        script = self.scripts[call.script]
        confirms = self._confirms(call)
        wired = self.cluster or self._wire is not None
        if first and ticket is not None and wired and not confirms:
            reply = await self._send_first(script, tail)
        else:
            send = self._send_on_cluster if self.cluster else self._send
            reply = await send(script, tail, confirms)
        if own:
            self._answered(ticket)
        return self._received(call, reply)

    async def call(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> T:
        """Runs the plan of ``op(ctx, *args, **kwargs)``, or resumes the one a lost
        reply (or a cancellation) left unfinished for the same call."""
        plan, call, ticket = self._start(op, args, kwargs)
        kept, first = False, call is None
        try:
            if call is None:
                call = next(plan)
            while True:
                ticket = self._ticket(call, ticket)
                try:
                    reply = await self.execute(call, first, ticket)
                except self.lost_reply as lost:
                    if ticket is None:
                        raise
                    kept = True
                    entry = _Suspended(op, args, kwargs, plan, call, ticket)
                    raise self._lost(entry, lost) from lost
                except asyncio.CancelledError:
                    if ticket is not None:  # the write may have run: a call again resumes it
                        kept = True
                        self._suspend(_Suspended(op, args, kwargs, plan, call, ticket))
                    raise
                except Exception:
                    self._answered(ticket)  # with an error
                    raise
                self._answered(ticket)
                ticket = None
                call, first = plan.send(reply), True
                if _cancel_requested():
                    # A cancellation that a step swallowed (redis-py's socket timeout
                    # wraps each send in asyncio.wait_for, which may) stops the
                    # method here, between steps: valid partial progress.
                    raise asyncio.CancelledError
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            if not kept:
                plan.close()  # an unfinished plan (an error) is closed
