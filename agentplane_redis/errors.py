"""The exceptions the library raises.

::

    AgentplaneRedisError
     ├── InvalidInput (also ValueError)   refused before anything reaches Redis
     ├── CorruptRow                       a stored row that cannot be decoded
     └── DurabilityNotConfirmed           "acknowledged" writes not confirmed

Connection and server failures are redis-py's own exceptions.

Scripts report expected outcomes, corruption included, as ordinary replies
with a leading status (never error replies, whose wording varies by server);
``STATUS_ERRORS`` maps each failing status to its exception class.
"""

from __future__ import annotations


class AgentplaneRedisError(Exception):
    """The root of everything this library raises."""


class InvalidInput(AgentplaneRedisError, ValueError):
    """Refused input; raised before any command reaches Redis, so nothing was written."""


class CorruptRow(AgentplaneRedisError):
    """A stored row that cannot be decoded; nothing is ever defaulted.

    Only this library writes rows, so this means tampering or a bug.
    """

    def __init__(self, what: str, detail: str = "") -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"corrupt row {what}" + (f": {detail}" if detail else ""))


class DurabilityNotConfirmed(AgentplaneRedisError):
    """``durability="acknowledged"`` could not confirm a write.

    The write may or may not persist; retrying the operation is safe.
    """


#: Leading status strings of script replies that are failures.
STATUS_ERRORS: dict[str, type[AgentplaneRedisError]] = {
    "CORRUPT": CorruptRow,
}
