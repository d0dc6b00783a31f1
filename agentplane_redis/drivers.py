"""Drivers run plans: each script call goes to the client, each reply back to the plan.

**Sending.** A call is ``FCALL`` of the operation's function in the package's
Functions library (``scripts.library()``), with the client's decoding turned
off for its reply (``NEVER_DECODE``), so a client made with
``decode_responses=True`` gets the same replies, and bytes that are not UTF-8
reach the codec, which reports them as ``CorruptRow``. When the server answers
that the function is not there (a new server, ``FUNCTION FLUSH``, a restart
without persistence) the driver loads the library with ``FUNCTION LOAD`` and
sends the call again: safe, since it never ran; should the function be gone
again by then (another client flushing), that call is sent as its script, which
cannot miss. Where the library cannot be
loaded (a server without Functions, or a user whose ACL refuses ``FUNCTION
LOAD`` and whose operator has not loaded it) the driver sends scripts from then
on: ``EVALSHA``, and on ``NOSCRIPT`` once more as ``EVAL`` with the script's
source, which cannot miss and caches the script again. ``functions=False``
sends scripts from the start. An error the server raised inside a script keeps
the class its code gives it (``OutOfMemoryError``, ``ReadOnlyError``, ...).

**The wire.** On a plain, pooled ``redis.Redis`` (or ``redis.asyncio.Redis``) the
driver packs its calls itself and sends them on the client's own pool with the
client's own retries (``wire.py``): the same commands and retries, less client
time per call (``docs/performance.md``).

**Lost replies.** A writing call carries a call token (``ops.Call``), and the
script remembers its reply under it, so re-sending the call, as redis-py's own
retries do, answers what its first execution did. The driver names the tokens
whose replies it has received on its next writing calls, and the scripts
forget those. When the client gives up (a connection error or timeout while a
write was in flight), the driver keeps the unfinished plan and raises
``OutcomeUnknown``; calling the same method again with the same arguments
resumes that plan with the same token, so the caller finally gets the first
execution's answer.

**Durability.** With ``durability="acknowledged"`` a writing call is sent in one
pipeline with ``WAITAOF`` (or ``WAIT`` on Redis 7.0), so the confirmation covers
the connection that ran the script. A pipeline whose call found no function
(or no script) is sent again after loading it; nothing in it ran.

**The server check.** Before its first call the store reads ``INFO`` once: it
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
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
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
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from . import codec
from .acl import masters
from .errors import DurabilityNotConfirmed, InvalidInput, OutcomeUnknown, ServerMisconfigured
from .ops import Call, Context, Plan
from .scripts import LuaLibrary, LuaScript, catalogue, library
from .wire import async_wire_for, wire_for

try:
    from redis._parsers.base import BaseParser
except ImportError:  # pragma: no cover - older redis-py layouts
    from redis.connection import BaseParser  # type: ignore[attr-defined]

T = TypeVar("T")
log = logging.getLogger("agentplane_redis")

#: How long the server may take to confirm an acknowledged write, in ms.
CONFIRM_TIMEOUT_MS = 2000
#: Errors after which a write that was sent may or may not have run.
LOST_REPLY = (ConnectionError, TimeoutError)
#: Received tokens named on one writing call, at most.
MAX_ACKS = 16
#: Received tokens a store gathers before a writing call names them (one HDEL for
#: them all): the server keeps at most this many remembered replies per store.
ACK_BATCH = 8
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
INFO_SECTIONS = ("server", "persistence", "replication", "memory")


def _script(script: LuaScript, by_source: bool) -> tuple[str, str]:
    """How a call names its script: ``EVALSHA sha``, or ``EVAL source``, which cannot
    miss the script cache (and fills it again)."""
    return ("EVAL", script.source) if by_source else ("EVALSHA", script.sha)


def _missing(error: object) -> bool:
    """Whether a call's error says its function (or script) is not on the server;
    then nothing ran."""
    if isinstance(error, NoScriptError):
        return True
    if type(error) is not ResponseError:
        return False
    text = str(error)
    return text.startswith("Function not found") or text.startswith("unknown command 'FCALL'")


def _already_loaded(error: ResponseError) -> bool:
    return "already exists" in str(error)


def _cannot_load(error: ResponseError) -> bool:
    """Whether ``FUNCTION LOAD`` was refused (an ACL) or is unknown (no Functions on
    the server); any other error is the library's own, and is raised."""
    return isinstance(error, NoPermissionError) or str(error).lower().startswith("unknown command")


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
    """
    if type(error) is ResponseError:
        mapped: Exception = BaseParser.parse_error(str(error))  # type: ignore[no-untyped-call]
        if type(mapped) is not ResponseError:
            return mapped
    return error


def _raise_server_error(error: Exception) -> None:
    mapped = server_error(error)
    if mapped is error:
        raise error
    raise mapped from error


@dataclass(frozen=True, slots=True)
class Confirmation:
    """How acknowledged writes are confirmed on this server."""

    command: tuple[str | int, ...]
    local: int
    replicas: int

    def check(self, reply: Any) -> None:
        if isinstance(reply, Exception):
            raise DurabilityNotConfirmed(f"the server refused the confirmation: {reply}") from reply
        if isinstance(reply, (list, tuple)):
            ok = int(reply[0]) >= self.local and int(reply[1]) >= self.replicas
        else:
            ok = int(reply) >= self.replicas
        if not ok:
            aof = " (a replica counts once it fsyncs its own AOF)" if self.local else ""
            raise DurabilityNotConfirmed(
                f"write not confirmed: {reply!r} (wanted {self.local} local fsync,"
                f" {self.replicas} replicas{aof})"
            )

    def settle(self, reply: Any, ack: Any) -> Any:
        """The script's reply from a pipeline ``[EVALSHA, confirmation]``, confirmed."""
        if isinstance(reply, Exception):
            _raise_server_error(reply)
        self.check(ack)
        return reply


def _version(info: dict[str, Any]) -> tuple[int, int]:
    if "valkey_version" in info:
        # Valkey reports redis_version 7.2.4 for compatibility and has WAITAOF.
        return (7, 2)
    major, minor, *_ = [*str(info.get("redis_version", "0.0")).split("."), "0"]
    return int(major), int(minor)


def online_replicas(info: dict[str, Any]) -> int:
    """Replicas past their initial sync: only they can acknowledge a write."""
    return sum(
        1
        for name, value in info.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


def plan_confirmation(info: dict[str, Any]) -> Confirmation:
    """The confirmation for a server, from ``INFO`` (server, persistence, replication).

    With AOF on (and ``WAITAOF``, Redis 7.2+ and Valkey): ``WAITAOF 1 <online
    replicas>``, which counts a replica once it has fsynced its own AOF, so
    replicas need ``appendonly yes`` too. Without AOF: ``WAIT <online replicas>``.
    """
    replicas = online_replicas(info)
    syncing = int(info.get("connected_slaves", 0)) - replicas
    waiting = f" ({syncing} replica(s) still in their initial sync)" if syncing > 0 else ""
    aof = bool(int(info.get("aof_enabled", 0)))
    if _version(info) >= (7, 2) and aof:
        return Confirmation(("WAITAOF", 1, replicas, CONFIRM_TIMEOUT_MS), 1, replicas)
    if replicas:
        return Confirmation(("WAIT", replicas, CONFIRM_TIMEOUT_MS), 0, replicas)
    if _version(info) >= (7, 2):
        raise DurabilityNotConfirmed(
            "durability='acknowledged' needs appendonly yes or an online replica; this"
            f" server has neither{waiting}"
        )
    raise DurabilityNotConfirmed(
        "durability='acknowledged' on Redis before 7.2 confirms with WAIT, which needs an"
        f" online replica; this server has none{waiting}"
    )


@dataclass(frozen=True, slots=True)
class ServerCheck:
    """What a store found on its server (``store.check()``)."""

    #: "redis 7.0.15", "valkey 8.1.8", or "unknown" where INFO is refused or missing.
    server: str
    #: maxmemory-policy; None when the server does not say.
    eviction_policy: str | None
    appendonly: bool | None
    online_replicas: int | None
    #: How acknowledged writes are confirmed; None with durability="fast".
    confirmation: Confirmation | None
    #: On a cluster: ``host:port`` of the master serving the tenant (whose INFO this is).
    node: str | None = None


def inspect_server(info: dict[str, Any] | None, durability: str) -> ServerCheck:
    """Refuses a server that would lose data or could not confirm; what was found."""
    if info is None:
        if durability == "acknowledged":
            raise DurabilityNotConfirmed(
                "durability='acknowledged' needs INFO to plan its confirmation, and the server"
                " refused it (grant +info, see docs/security.md)"
            )
        return ServerCheck("unknown", None, None, None, None)
    policy = info.get("maxmemory_policy")
    if isinstance(policy, str) and policy.startswith("allkeys-"):
        raise ServerMisconfigured(
            f"maxmemory-policy is {policy}: eviction would silently delete the store's rows"
            " and indexes. Use noeviction (or a volatile-* policy: the store sets no TTLs)."
        )
    if "valkey_version" in info:
        name = f"valkey {info['valkey_version']}"
    else:
        name = f"redis {info.get('redis_version', '?')}"
    confirmation = plan_confirmation(info) if durability == "acknowledged" else None
    aof = "aof_enabled" in info and bool(int(info["aof_enabled"]))
    return ServerCheck(
        name, policy if isinstance(policy, str) else None, aof, online_replicas(info), confirmation
    )


def _info_refused(error: ResponseError) -> None:
    """INFO refused: by an ACL without +info (warned), or unknown (fakeredis has no INFO)."""
    if isinstance(error, NoPermissionError):
        log.warning("the server refused INFO (%s): its eviction policy is not checked", error)


@dataclass(slots=True)
class _Suspended:
    """A plan whose last call's reply was lost, kept for a call again."""

    op: Callable[..., Plan[Any]]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    plan: Plan[Any]
    call: Call

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
        #: The library the calls use; None once they send scripts instead.
        self.library: LuaLibrary | None = library() if functions else None
        self._acks: deque[str] = deque()
        #: Scripts sent whole at least once in a pipeline (NOSCRIPT there costs a resend).
        self._sent: set[str] = set()
        #: Servers (owners, on a cluster) a pipeline found or loaded the library on.
        self._placed: set[str] = set()
        self._suspended: list[_Suspended] = []
        self._lock = threading.Lock()
        #: The store's methods bound to this driver, by descriptor (``store.Op``).
        self.bound: dict[object, Callable[..., Any]] = {}

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
        self._placed.clear()
        moved = type(error) is MovedError
        return moved or isinstance(error, CLUSTER_REROUTE), 0.0 if moved else pause

    def owner_name(self) -> str:
        """On a cluster: the ``host:port`` of the master serving the tenant's slot."""
        return str(self.client.nodes_manager.get_node_from_slot(self.slot).name)

    def _confirms(self, call: Call) -> bool:
        return self.durability == "acknowledged" and call.writes

    def _take_acks(self, call: Call) -> list[str]:
        acks: list[str] = []
        if call.writes and len(self._acks) >= ACK_BATCH:
            pending = self._acks
            while pending and len(acks) < MAX_ACKS:
                try:
                    acks.append(pending.popleft())
                except IndexError:  # taken by another thread meanwhile
                    break
        return acks

    def _command(self, call: Call, acks: list[str]) -> tuple[Any, ...]:
        """The arguments after the script: key count, keys, args, then for a write its
        token and the acknowledged tokens (last, so that the script reads its
        arguments where they arrive, without copying them)."""
        tail: tuple[str, ...] = (call.token, ",".join(acks)) if call.writes else ()
        return (len(call.keys), *call.keys, *call.args, *tail)

    def _received(self, call: Call, reply: Any) -> Any:
        if call.writes:
            self._acks.append(call.token)
        return codec.reply_list(reply)

    def _head(self, script: LuaScript, by_source: bool = False) -> tuple[str, str]:
        """The command and name that call a script: ``FCALL`` of its function while
        the library is in use, else ``EVALSHA``; ``EVAL`` of its source with
        ``by_source`` (a call whose function went missing again once loaded)."""
        if self.library is not None and not by_source:
            return ("FCALL", self.library.functions[script.name])
        return _script(script, by_source)

    def _unloadable(self, error: ResponseError) -> None:
        """The library could not be loaded: calls send scripts from now on."""
        if self.library is not None:
            log.warning(
                "the Functions library %s could not be loaded (%s); sending scripts instead."
                " An operator can load it: agentplane-redis library",
                self.library.name,
                error,
            )
        self.library = None

    def _load_refused(self, error: ResponseError) -> bool:
        """After ``FUNCTION LOAD`` answered an error: whether the library is there (it
        was already loaded); False on a replica (the call sends its script) or where
        it cannot be loaded (calls send scripts from now on); any other error is the
        library's own, and is raised."""
        if _already_loaded(error):
            return True
        if isinstance(error, ReadOnlyError):
            return False
        if not _cannot_load(error):
            raise error
        self._unloadable(error)
        return False

    def _confirmed_pipeline(
        self,
        target: Any,
        confirmation: Confirmation,
        script: LuaScript,
        tail: tuple[Any, ...],
        by_source: bool,
    ) -> Any:
        """A pipeline of the script call and its confirmation, on one connection."""
        pipe = target.pipeline(transaction=False)
        pipe.execute_command(*self._head(script, by_source), *tail, **_RAW)
        pipe.execute_command(*confirmation.command)
        return pipe

    def _settle(self, confirmation: Confirmation, script: LuaScript, reply: Any, ack: Any) -> Any:
        self._sent.add(script.sha)
        return confirmation.settle(reply, ack)

    def _checked(self, info: dict[str, Any] | None) -> ServerCheck:
        server = inspect_server(info, self.durability)
        if self.cluster:
            owner = self.owner_name()
            self._confirmations = {owner: server.confirmation}
            server = dataclasses.replace(server, node=owner)
        return server

    def _start(
        self, op: Callable[..., Plan[T]], args: Any, kwargs: Any
    ) -> tuple[Plan[T], Call | None]:
        """A new plan for the call, or the one a lost reply left for the same call."""
        entry = self._resume(op, args, kwargs)
        if entry is None:
            return op(self.ctx, *args, **kwargs), None
        return entry.plan, entry.call

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
        self.server = self.check()

    def _owner(self) -> tuple[str, Any]:
        """On a cluster: the name and plain client of the master serving the slot."""
        node = self.client.nodes_manager.get_node_from_slot(self.slot)
        return node.name, self.client.get_redis_connection(node)

    @staticmethod
    def _info(target: Any) -> dict[str, Any] | None:
        try:
            return target.info(*INFO_SECTIONS)  # type: ignore[no-any-return]
        except ResponseError as refused:
            _info_refused(refused)
            return None

    def check(self) -> ServerCheck:
        return self._checked(self._info(self._owner()[1] if self.cluster else self.client))

    def _target(self) -> tuple[Any, Confirmation]:
        """Where an acknowledged write goes, and how it is confirmed there."""
        if not self.cluster:
            assert self.confirmation is not None
            return self.client, self.confirmation
        name, owner = self._owner()
        if name not in self._confirmations:
            planned = inspect_server(self._info(owner), self.durability)
            self._confirmations[name] = planned.confirmation
        confirmation = self._confirmations[name]
        assert confirmation is not None
        return owner, confirmation

    def load_library(self) -> bool:
        """Loads the library on every master (a slot may move to any of them); False
        when it cannot be (and calls send scripts from then on, or this call does, on
        a replica)."""
        return all(self._load_on(server) for server in masters(self.client))

    def _load_on(self, target: Any) -> bool:
        if self.library is None:
            return False
        try:
            target.execute_command("FUNCTION", "LOAD", self.library.source)
        except ResponseError as error:
            return self._load_refused(error)
        return True

    def _run(self, head: tuple[str, str], tail: tuple[Any, ...], options: dict[Any, Any]) -> Any:
        if self._wire is not None:
            return self._wire.call(head, tail)
        return self.client.execute_command(*head, *tail, **options)

    def _eval(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        options: dict[Any, Any] = _RAW
        if self.cluster:  # routed to the slot's owner without asking for its keys
            node = self.client.nodes_manager.get_node_from_slot(self.slot)
            options = {**_RAW, "target_nodes": node}
        try:
            if self.library is not None:
                try:
                    return self._run(self._head(script), tail, options)
                except ResponseError as error:
                    if not _missing(error):
                        raise
                if self.load_library():
                    try:
                        return self._run(self._head(script), tail, options)
                    except ResponseError as error:  # gone again: this call sends its script
                        if not _missing(error):
                            raise
            try:
                return self._run(("EVALSHA", script.sha), tail, options)
            except NoScriptError:  # not cached (restart, failover, flush): it never ran
                return self.client.execute_command("EVAL", script.source, *tail, **options)
        except ResponseError as error:
            _raise_server_error(error)

    def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        target, confirmation = self._target()
        where = self.owner_name() if self.cluster else ""
        if self.library is not None and where not in self._placed:
            # before its first pipeline there: a miss inside one would confirm twice
            self._load_on(target)
            self._placed.add(where)
        by_source = self.library is None and script.sha not in self._sent
        for attempt in range(3):
            pipe = self._confirmed_pipeline(target, confirmation, script, tail, by_source)
            reply, ack = pipe.execute(raise_on_error=False)
            if by_source or not _missing(reply):
                break
            # not on the server (flushed, restarted, never loaded): nothing ran. Gone
            # again once loaded, the last try sends the script's source: it cannot miss.
            by_source = attempt > 0 or not self._load_on(target)
        return self._settle(confirmation, script, reply, ack)

    def _send(self, script: LuaScript, tail: tuple[Any, ...], confirms: bool) -> Any:
        if confirms:
            return self._eval_confirmed(script, tail)
        return self._eval(script, tail)

    def _send_on_cluster(self, script: LuaScript, tail: tuple[Any, ...], confirms: bool) -> Any:
        for pause in pauses(self.patience):
            try:
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

    def execute(self, call: Call) -> Any:
        acks = self._take_acks(call)
        tail = self._command(call, acks)
        script = self.scripts[call.script]
        send = self._send_on_cluster if self.cluster else self._send
        try:
            reply = send(script, tail, self._confirms(call))
        except BaseException:
            self._acks.extend(acks)
            raise
        return self._received(call, reply)

    def call(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> T:
        """Runs the plan of ``op(ctx, *args, **kwargs)``, or resumes the one a lost
        reply left unfinished for the same call."""
        plan, call = self._start(op, args, kwargs)
        kept = False
        try:
            if call is None:
                call = next(plan)
            while True:
                try:
                    reply = self.execute(call)
                except self.lost_reply as lost:
                    if not call.writes:
                        raise
                    kept = True
                    raise self._lost(_Suspended(op, args, kwargs, plan, call), lost) from lost
                call = plan.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            if not kept:
                plan.close()  # an unfinished plan (an error) is closed


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
        owners, self._owners = self._owners, {}
        for plain in owners.values():
            await plain.aclose()

    @staticmethod
    async def _info(target: Any) -> dict[str, Any] | None:
        try:
            return await target.info(*INFO_SECTIONS)  # type: ignore[no-any-return]
        except ResponseError as refused:
            _info_refused(refused)
            return None

    async def check(self) -> ServerCheck:
        if self.cluster:
            await self.client.initialize()
        self.server = self._checked(
            await self._info(self._owner()[1] if self.cluster else self.client)
        )
        return self.server

    async def _target(self) -> tuple[Any, Confirmation]:
        """Where an acknowledged write goes, and how it is confirmed there."""
        if not self.cluster:
            assert self.confirmation is not None
            return self.client, self.confirmation
        name, owner = self._owner()
        if name not in self._confirmations:
            planned = inspect_server(await self._info(owner), self.durability)
            self._confirmations[name] = planned.confirmation
        confirmation = self._confirmations[name]
        assert confirmation is not None
        return owner, confirmation

    def _servers(self) -> list[Any]:
        """A client of each server the library must be on: every master of a cluster
        (a slot may move to any of them)."""
        if not self.cluster:
            return [self.client]
        return [self._plain(n) for n in self.client.get_primaries()]

    async def load_library(self) -> bool:
        """Loads the library where it must be; False when it cannot be (and calls send
        scripts from then on, or this call does, on a replica)."""
        loaded = [await self._load_on(server) for server in self._servers()]
        return all(loaded)

    async def _load_on(self, target: Any) -> bool:
        if self.library is None:
            return False
        try:
            await target.execute_command("FUNCTION", "LOAD", self.library.source)
        except ResponseError as error:
            return self._load_refused(error)
        return True

    async def _run(
        self, head: tuple[str, str], tail: tuple[Any, ...], options: dict[Any, Any]
    ) -> Any:
        if self._wire is not None:
            return await self._wire.call(head, tail)
        return await self.client.execute_command(*head, *tail, **options)

    async def _eval(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        options: dict[Any, Any] = _RAW
        if self.cluster:  # routed to the slot's owner without asking for its keys
            node = self.client.nodes_manager.get_node_from_slot(self.slot)
            options = {**_RAW, "target_nodes": node}
        try:
            if self.library is not None:
                try:
                    return await self._run(self._head(script), tail, options)
                except ResponseError as error:
                    if not _missing(error):
                        raise
                if await self.load_library():
                    try:
                        return await self._run(self._head(script), tail, options)
                    except ResponseError as error:  # gone again: this call sends its script
                        if not _missing(error):
                            raise
            try:
                return await self._run(("EVALSHA", script.sha), tail, options)
            except NoScriptError:  # not cached (restart, failover, flush): it never ran
                return await self.client.execute_command("EVAL", script.source, *tail, **options)
        except ResponseError as error:
            _raise_server_error(error)

    async def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        target, confirmation = await self._target()
        where = self.owner_name() if self.cluster else ""
        if self.library is not None and where not in self._placed:
            # before its first pipeline there: a miss inside one would confirm twice
            await self._load_on(target)
            self._placed.add(where)
        by_source = self.library is None and script.sha not in self._sent
        for attempt in range(3):
            pipe = self._confirmed_pipeline(target, confirmation, script, tail, by_source)
            reply, ack = await pipe.execute(raise_on_error=False)
            if by_source or not _missing(reply):
                break
            # not on the server (flushed, restarted, never loaded): nothing ran. Gone
            # again once loaded, the last try sends the script's source: it cannot miss.
            by_source = attempt > 0 or not await self._load_on(target)
        return self._settle(confirmation, script, reply, ack)

    async def _send(self, script: LuaScript, tail: tuple[Any, ...], confirms: bool) -> Any:
        if confirms:
            return await self._eval_confirmed(script, tail)
        return await self._eval(script, tail)

    async def _send_on_cluster(
        self, script: LuaScript, tail: tuple[Any, ...], confirms: bool
    ) -> Any:
        for pause in pauses(self.patience):
            try:
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

    async def execute(self, call: Call) -> Any:
        if self.server is None:
            await self.check()
        acks = self._take_acks(call)
        tail = self._command(call, acks)
        script = self.scripts[call.script]
        send = self._send_on_cluster if self.cluster else self._send
        try:
            reply = await send(script, tail, self._confirms(call))
        except BaseException:
            self._acks.extend(acks)
            raise
        return self._received(call, reply)

    async def call(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> T:
        """Runs the plan of ``op(ctx, *args, **kwargs)``, or resumes the one a lost
        reply (or a cancellation) left unfinished for the same call."""
        plan, call = self._start(op, args, kwargs)
        kept = False
        try:
            if call is None:
                call = next(plan)
            while True:
                try:
                    reply = await self.execute(call)
                except self.lost_reply as lost:
                    if not call.writes:
                        raise
                    kept = True
                    raise self._lost(_Suspended(op, args, kwargs, plan, call), lost) from lost
                except asyncio.CancelledError:
                    if call.writes:  # the write may have run: a call again resumes it
                        kept = True
                        self._suspend(_Suspended(op, args, kwargs, plan, call))
                    raise
                call = plan.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            if not kept:
                plan.close()  # an unfinished plan (an error) is closed
