"""Drivers run plans: each script call goes to the client, each reply back to the plan.

**Sending.** A call is ``EVALSHA`` with the client's decoding turned off for
its reply (``NEVER_DECODE``), so a client made with ``decode_responses=True``
gets the same replies, and bytes that are not UTF-8 reach the codec, which
reports them as ``CorruptRow``. On ``NOSCRIPT`` (after a restart, failover or
``SCRIPT FLUSH``) the call is sent once more as ``EVAL`` with the script's
source, which cannot miss and caches the script again: safe, since it never
ran. An error the server raised inside a script keeps the class its
code gives it (``OutOfMemoryError``, ``ReadOnlyError``, ...).

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
the connection that ran the script; a pipeline cannot handle ``NOSCRIPT`` half
way, so a script's first pipeline sends its source.

**The server check.** Before its first call the store reads ``INFO`` once: it
refuses an ``allkeys-*`` eviction policy (eviction would silently drop rows)
and plans the confirmation of acknowledged writes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.client import NEVER_DECODE
from redis.exceptions import (
    ConnectionError,
    NoPermissionError,
    NoScriptError,
    ResponseError,
    TimeoutError,
)

from . import codec
from .errors import DurabilityNotConfirmed, InvalidInput, OutcomeUnknown, ServerMisconfigured
from .ops import Call, Context, Plan
from .scripts import LuaScript, catalogue

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
#: Unfinished plans kept for a call again, per store; the oldest is dropped.
MAX_SUSPENDED = 64
#: Replies of script calls are never decoded by the client (see the module's doc).
_RAW = {NEVER_DECODE: True}
INFO_SECTIONS = ("server", "persistence", "replication", "memory")


def _script(script: LuaScript, by_source: bool) -> tuple[str, str]:
    """How a call names its script: ``EVALSHA sha``, or ``EVAL source``, which cannot
    miss the script cache (and fills it again)."""
    return ("EVAL", script.source) if by_source else ("EVALSHA", script.sha)


def durability_mode(value: object) -> str:
    if value not in ("fast", "acknowledged"):
        raise InvalidInput('durability must be "fast" or "acknowledged"')
    return str(value)


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
            raise DurabilityNotConfirmed(
                f"write not confirmed: {reply!r} (wanted {self.local} local fsync,"
                f" {self.replicas} replicas)"
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
    """The confirmation for a server, from ``INFO`` (server, persistence, replication)."""
    replicas = online_replicas(info)
    syncing = int(info.get("connected_slaves", 0)) - replicas
    waiting = f" ({syncing} replica(s) still in their initial sync)" if syncing > 0 else ""
    if _version(info) >= (7, 2):
        local = 1 if int(info.get("aof_enabled", 0)) else 0
        if local == 0 and replicas == 0:
            raise DurabilityNotConfirmed(
                "durability='acknowledged' needs appendonly yes or an online replica; this"
                f" server has neither{waiting}"
            )
        return Confirmation(("WAITAOF", local, replicas, CONFIRM_TIMEOUT_MS), local, replicas)
    if replicas == 0:
        raise DurabilityNotConfirmed(
            "durability='acknowledged' on Redis before 7.2 confirms with WAIT, which needs an"
            f" online replica; this server has none{waiting}"
        )
    return Confirmation(("WAIT", replicas, CONFIRM_TIMEOUT_MS), 0, replicas)


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
    def __init__(self, client: Any, ctx: Context, durability: str) -> None:
        self.client = client
        self.ctx = ctx
        self.durability = durability
        self.server: ServerCheck | None = None
        self.scripts: dict[str, LuaScript] = dict(catalogue())
        self._acks: deque[str] = deque()
        #: Scripts sent whole at least once in a pipeline (NOSCRIPT there costs a resend).
        self._sent: set[str] = set()
        self._suspended: list[_Suspended] = []
        self._lock = threading.Lock()

    @property
    def confirmation(self) -> Confirmation | None:
        return self.server.confirmation if self.server else None

    def _confirms(self, call: Call) -> bool:
        return self.durability == "acknowledged" and call.writes

    def _take_acks(self, call: Call) -> list[str]:
        acks: list[str] = []
        while call.writes and len(acks) < MAX_ACKS:
            try:
                acks.append(self._acks.popleft())
            except IndexError:
                break
        return acks

    def _command(self, call: Call, acks: list[str]) -> tuple[Any, ...]:
        """The arguments after the script: key count, keys, then token, acks and args."""
        head: tuple[str, ...] = (call.token, ",".join(acks)) if call.writes else ()
        return (len(call.keys), *call.keys, *head, *call.args)

    def _received(self, call: Call, reply: Any) -> Any:
        if not call.writes:
            return reply
        self._acks.append(call.token)
        if isinstance(reply, list) and reply and codec.text(reply[0]) == "REPLAY":
            return codec.replayed(reply[1])
        return reply

    def _confirmed_pipeline(self, script: LuaScript, tail: tuple[Any, ...], by_source: bool) -> Any:
        """A pipeline of the script call and its confirmation, on one connection."""
        assert self.confirmation is not None
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command(*_script(script, by_source), *tail, **_RAW)
        pipe.execute_command(*self.confirmation.command)
        return pipe

    def _settle(self, script: LuaScript, reply: Any, ack: Any) -> Any:
        assert self.confirmation is not None
        self._sent.add(script.sha)
        return self.confirmation.settle(reply, ack)

    def _start(
        self, op: Callable[..., Plan[T]], args: Any, kwargs: Any
    ) -> tuple[Plan[T], Call | None]:
        """A new plan for the call, or the one a lost reply left for the same call."""
        entry = self._resume(op, args, kwargs)
        if entry is None:
            return op(self.ctx, *args, **kwargs), None
        return entry.plan, entry.call

    def _resume(self, op: Callable[..., Plan[T]], args: Any, kwargs: Any) -> _Suspended | None:
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
    def __init__(self, client: Any, ctx: Context, durability: str) -> None:
        if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
            raise InvalidInput("RedisStore needs a synchronous client; use AsyncRedisStore")
        super().__init__(client, ctx, durability)
        self.server = self.check()

    def check(self) -> ServerCheck:
        try:
            info: dict[str, Any] | None = self.client.info(*INFO_SECTIONS)
        except ResponseError as refused:
            _info_refused(refused)
            info = None
        return inspect_server(info, self.durability)

    def _eval(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        try:
            try:
                return self.client.execute_command("EVALSHA", script.sha, *tail, **_RAW)
            except NoScriptError:  # not cached (restart, failover, flush): it never ran
                return self.client.execute_command("EVAL", script.source, *tail, **_RAW)
        except ResponseError as error:
            _raise_server_error(error)

    def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        by_source = script.sha not in self._sent
        while True:
            pipe = self._confirmed_pipeline(script, tail, by_source)
            reply, ack = pipe.execute(raise_on_error=False)
            if by_source or not isinstance(reply, NoScriptError):
                break
            by_source = True  # flushed since it was sent: send the source itself
        return self._settle(script, reply, ack)

    def execute(self, call: Call) -> Any:
        acks = self._take_acks(call)
        tail = self._command(call, acks)
        script = self.scripts[call.script]
        try:
            if self._confirms(call):
                reply = self._eval_confirmed(script, tail)
            else:
                reply = self._eval(script, tail)
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
                except LOST_REPLY as lost:
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


class AsyncDriver(_Driver):
    def __init__(self, client: Any, ctx: Context, durability: str) -> None:
        if not inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
            raise InvalidInput(
                "AsyncRedisStore needs an asyncio client (redis.asyncio); use RedisStore"
            )
        super().__init__(client, ctx, durability)

    async def check(self) -> ServerCheck:
        try:
            info: dict[str, Any] | None = await self.client.info(*INFO_SECTIONS)
        except ResponseError as refused:
            _info_refused(refused)
            info = None
        self.server = inspect_server(info, self.durability)
        return self.server

    async def _eval(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        try:
            try:
                return await self.client.execute_command("EVALSHA", script.sha, *tail, **_RAW)
            except NoScriptError:  # not cached (restart, failover, flush): it never ran
                return await self.client.execute_command("EVAL", script.source, *tail, **_RAW)
        except ResponseError as error:
            _raise_server_error(error)

    async def _eval_confirmed(self, script: LuaScript, tail: tuple[Any, ...]) -> Any:
        by_source = script.sha not in self._sent
        while True:
            pipe = self._confirmed_pipeline(script, tail, by_source)
            reply, ack = await pipe.execute(raise_on_error=False)
            if by_source or not isinstance(reply, NoScriptError):
                break
            by_source = True  # flushed since it was sent: send the source itself
        return self._settle(script, reply, ack)

    async def execute(self, call: Call) -> Any:
        if self.server is None:
            await self.check()
        acks = self._take_acks(call)
        tail = self._command(call, acks)
        script = self.scripts[call.script]
        try:
            if self._confirms(call):
                reply = await self._eval_confirmed(script, tail)
            else:
                reply = await self._eval(script, tail)
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
                except LOST_REPLY as lost:
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
