"""agentplane-redis: durable inbound-event and timer stores on Redis."""

from .aio import AsyncRedisStore
from .errors import AgentplaneRedisError, CorruptRow, DurabilityNotConfirmed, InvalidInput
from .model import (
    JSON,
    Buffered,
    BufferedEvent,
    Closed,
    CorrelationKey,
    DeadLetter,
    Duplicate,
    EventStats,
    InboundEvent,
    Matched,
    Minter,
    NotWaiting,
    Operator,
    Phase,
    Resumed,
    Retired,
    Subscription,
    Timer,
)
from .store import RedisStore

__all__ = [
    "JSON",
    "AgentplaneRedisError",
    "AsyncRedisStore",
    "Buffered",
    "BufferedEvent",
    "Closed",
    "CorrelationKey",
    "CorruptRow",
    "DeadLetter",
    "Duplicate",
    "DurabilityNotConfirmed",
    "EventStats",
    "InboundEvent",
    "InvalidInput",
    "Matched",
    "Minter",
    "NotWaiting",
    "Operator",
    "Phase",
    "RedisStore",
    "Resumed",
    "Retired",
    "Subscription",
    "Timer",
]
