"""The exceptions the library raises.

::

    AgentplaneRedisError
     ├── InvalidInput (also ValueError)   refused before anything reaches Redis
     ├── CorruptRow                       a stored row that cannot be decoded
     ├── DurabilityNotConfirmed           "acknowledged" writes not confirmed
     ├── ServerMisconfigured              the server would lose data (eviction)
     ├── LibraryError                     the Functions library cannot be used
     │    ├── LibraryMissing              not loaded, and this user may not load it
     │    └── LibraryMismatch             loaded, but not this release's code
     ├── ServerBusy (also ResponseError)  BUSY: the server runs a long script
     └── OutcomeUnknown (also redis ConnectionError)
                                          a write's reply was lost: call again

Other connection and server failures are redis-py's own exceptions, with the
class the server's error code gives them (``OutOfMemoryError``,
``ReadOnlyError``, ``NoPermissionError``, ...) even when raised inside a script.

Scripts report expected outcomes, corruption included, as ordinary replies
with a leading status (never error replies, whose wording varies by server);
``STATUS_ERRORS`` maps each failing status to its exception class.
"""

from __future__ import annotations

import redis.exceptions


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


class ServerMisconfigured(AgentplaneRedisError):
    """The server is configured so that it would silently lose the store's data
    (an ``allkeys-*`` eviction policy); the store refuses to run on it."""


class LibraryError(AgentplaneRedisError):
    """The store's Functions library cannot be used on this server."""


class LibraryMissing(LibraryError):
    """The library is not loaded, and this store's user may neither load it nor send
    scripts (a tenant's ACL user): an administrator loads it with ``agentplane-redis
    library`` (or ``agentplane_redis.acl.load_library``)."""


class LibraryMismatch(LibraryError):
    """A library of this release's name is loaded, but its code is not the code this
    release ships (or this user may not read it to compare): the store refuses to run
    code it cannot vouch for. An administrator's ``agentplane-redis library`` replaces
    it; ``docs/security.md`` says who may load Functions."""


class ServerBusy(AgentplaneRedisError, redis.exceptions.ResponseError):
    """``BUSY``: the server is running a script past its busy threshold and answers
    nothing else until it ends (or is killed); the call did not run. Transient."""


class OutcomeUnknown(AgentplaneRedisError, redis.exceptions.ConnectionError):
    """A write was sent but its reply never arrived: it may or may not have run.

    Call the same method again, with the same arguments, on the same store
    (within 24 hours): the store re-sends the same call token, and the answer is
    the first execution's if it ran, or a first execution now if it did not.
    The original error is ``__cause__``.
    """


#: Leading status strings of script replies that are failures.
STATUS_ERRORS: dict[str, type[AgentplaneRedisError]] = {
    "CORRUPT": CorruptRow,
}
