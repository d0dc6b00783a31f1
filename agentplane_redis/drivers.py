"""Drivers run plans: each script call goes to the client, each reply back to the plan.

Scripts are registered once per driver through redis-py's ``Script``, which
calls ``EVALSHA`` and, on ``NOSCRIPT`` (after a restart, failover or ``SCRIPT
FLUSH``), loads the script and retries once: safe, since it never ran. The
library retries nothing else.

With ``durability="acknowledged"``, a call that may write is sent in one
pipeline with ``WAITAOF`` (or ``WAIT`` on Redis 7.0), so the confirmation covers
the connection that ran the script; pipelines load their scripts first.
"""

from __future__ import annotations

import weakref
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import DurabilityNotConfirmed, InvalidInput
from .ops import Call, Context, Plan
from .scripts import catalogue

T = TypeVar("T")

#: How long the server may take to confirm an acknowledged write, in ms.
CONFIRM_TIMEOUT_MS = 2000


def durability_mode(value: object) -> str:
    if value not in ("fast", "acknowledged"):
        raise InvalidInput('durability must be "fast" or "acknowledged"')
    return str(value)


@dataclass(frozen=True, slots=True)
class Confirmation:
    """How acknowledged writes are confirmed on this server."""

    command: tuple[str | int, ...]
    local: int
    replicas: int

    def check(self, reply: Any) -> None:
        if isinstance(reply, (list, tuple)):
            ok = int(reply[0]) >= self.local and int(reply[1]) >= self.replicas
        else:
            ok = int(reply) >= self.replicas
        if not ok:
            raise DurabilityNotConfirmed(
                f"write not confirmed: {reply!r} (wanted {self.local} local fsync,"
                f" {self.replicas} replicas)"
            )


def _version(info: dict[str, Any]) -> tuple[int, int]:
    if "valkey_version" in info:
        # Valkey reports redis_version 7.2.4 for compatibility and has WAITAOF.
        return (7, 2)
    major, minor, *_ = [*str(info.get("redis_version", "0.0")).split("."), "0"]
    return int(major), int(minor)


def plan_confirmation(info: dict[str, Any]) -> Confirmation:
    """The confirmation for a server, from ``INFO`` (server, persistence, replication)."""
    replicas = int(info.get("connected_slaves", 0))
    if _version(info) >= (7, 2):
        local = 1 if int(info.get("aof_enabled", 0)) else 0
        if local == 0 and replicas == 0:
            raise DurabilityNotConfirmed(
                "durability='acknowledged' needs appendonly yes or a replica; this server has"
                " neither"
            )
        return Confirmation(("WAITAOF", local, replicas, CONFIRM_TIMEOUT_MS), local, replicas)
    if replicas == 0:
        raise DurabilityNotConfirmed(
            "durability='acknowledged' on Redis before 7.2 confirms with WAIT, which needs a"
            " replica; this server has none"
        )
    return Confirmation(("WAIT", replicas, CONFIRM_TIMEOUT_MS), 0, replicas)


#: Registered scripts per client, so stores of many tenants on one client share them.
_registered: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def registered_scripts(client: Any) -> dict[str, Any]:
    """redis-py ``Script`` objects for every operation, registered once per client."""
    try:
        return _registered[client]
    except KeyError:
        pass
    except TypeError:  # a client that cannot be weakly referenced: register for this store
        return {name: client.register_script(s.source) for name, s in catalogue().items()}
    scripts = {name: client.register_script(s.source) for name, s in catalogue().items()}
    _registered[client] = scripts
    return scripts


class _Driver:
    def __init__(self, client: Any, ctx: Context, durability: str) -> None:
        self.client = client
        self.ctx = ctx
        self.durability = durability
        self.confirmation: Confirmation | None = None
        self.scripts = registered_scripts(client)

    def _confirms(self, call: Call) -> bool:
        return self.durability == "acknowledged" and call.writes


class SyncDriver(_Driver):
    def __init__(self, client: Any, ctx: Context, durability: str) -> None:
        super().__init__(client, ctx, durability)
        if durability == "acknowledged":
            self.confirmation = plan_confirmation(client.info())

    def execute(self, call: Call) -> Any:
        script = self.scripts[call.script]
        if not self._confirms(call):
            return script(keys=list(call.keys), args=list(call.args))
        assert self.confirmation is not None
        pipe = self.client.pipeline(transaction=False)
        script(keys=list(call.keys), args=list(call.args), client=pipe)
        pipe.execute_command(*self.confirmation.command)
        reply, ack = pipe.execute()
        self.confirmation.check(ack)
        return reply

    def run(self, plan: Plan[T]) -> T:
        with closing(plan):  # an unfinished plan (a connection error) is closed
            try:
                call = next(plan)
                while True:
                    call = plan.send(self.execute(call))
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


class AsyncDriver(_Driver):
    async def execute(self, call: Call) -> Any:
        script = self.scripts[call.script]
        if not self._confirms(call):
            return await script(keys=list(call.keys), args=list(call.args))
        if self.confirmation is None:
            self.confirmation = plan_confirmation(await self.client.info())
        pipe = self.client.pipeline(transaction=False)
        await script(keys=list(call.keys), args=list(call.args), client=pipe)
        pipe.execute_command(*self.confirmation.command)
        reply, ack = await pipe.execute()
        self.confirmation.check(ack)
        return reply

    async def run(self, plan: Plan[T]) -> T:
        with closing(plan):  # an unfinished plan (a connection error) is closed
            try:
                call = next(plan)
                while True:
                    call = plan.send(await self.execute(call))
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
