"""What a store needs of its server besides its operations: the start-up check, the
Functions library (loaded, verified, listed, deleted), and the one ladder every call
climbs to reach its function.

**The ladder** (``Ladder``) is planned here once, with no I/O, as generators that
yield ``Send``s and receive each reply (or the ``ResponseError`` it raised); the
sync and async drivers only run it. A call climbs:

1. ``FCALL`` of the operation's function, once the library has been **verified** on
   the server the call goes to: ``FUNCTION LIST ... WITHCODE`` must show this
   release's library with exactly the code this release ships. Any user allowed
   ``FUNCTION LOAD`` could otherwise replace it, under its own name, with code that
   runs inside every tenant's calls; a mismatch raises ``LibraryMismatch``.
2. Where the library is missing (a new server, ``FUNCTION FLUSH``, a restart
   without persistence), the store loads it (``FUNCTION LOAD``: nothing ran, so the
   call is simply sent again), or, where its user may not load it, falls back to
   sending the operation as a script (``EVALSHA``, then ``EVAL``), if that user may.
   A tenant's ACL user may do neither (``acl.py``): its store raises
   ``LibraryMissing``, naming the command an administrator runs.
3. A fallback lasts ``SCRIPTS_FOR_S``; then the call climbs from step 1 again, so a
   library loaded again later is used again.

**The start-up check** reads ``INFO`` (eviction policy, persistence, replicas,
version). A tenant's user may not read ``INFO`` (it shows every tenant's key counts,
every client and every command's statistics), so its check reads ``HELLO``
instead (server, version, mode) and leaves what only ``INFO`` shows unknown: the
administrator's ``agentplane-redis check`` checks it.

**Library administration** (``install_library``, ``verify_library``,
``libraries``, ``delete_library``) is for the administrator's client.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import NoPermissionError, NoScriptError, ReadOnlyError, ResponseError

from .errors import DurabilityNotConfirmed, LibraryMismatch, LibraryMissing, ServerMisconfigured
from .scripts import LuaLibrary, LuaScript, library

log = logging.getLogger("agentplane_redis")

#: After a store found the library missing and could not load it, but may send
#: scripts: how long its calls send scripts before they try ``FCALL`` again, in s.
SCRIPTS_FOR_S = 1.0
#: How long a verification holds for the other stores over the same client (its
#: connection pool), in s: stores made for one call each (a request handler's) read
#: the library's code (about 100 KB) once a minute, not once a store.
VERIFIED_FOR_S = 60.0
#: The verifications each client's stores share: (where, library) -> when.
_shared: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], float]] = weakref.WeakKeyDictionary()


def shared_verifications(owner: Any) -> dict[tuple[str, str], float]:
    """The verifications shared by the stores over ``owner`` (a client's connection
    pool); a fresh dict, shared with none, where it cannot be weakly referenced."""
    try:
        return _shared.setdefault(owner, {})
    except TypeError:
        return {}


#: How long the server may take to confirm an acknowledged write, in ms.
CONFIRM_TIMEOUT_MS = 2000
INFO_SECTIONS = ("server", "persistence", "replication", "memory")
HOW_TO_LOAD = "an administrator loads it: agentplane-redis library"


# ---------------------------------------------------------------- the ladder


@dataclass(frozen=True, slots=True)
class Send:
    """One command a ladder asks its driver to send to the tenant's server.

    ``call``: the operation itself, ``head`` (``FCALL fn``, ``EVALSHA sha`` or
    ``EVAL source``) then the call's ``tail``, sent as the store sends its calls
    (packed, routed, confirmed where the store confirms). Otherwise an
    administrative command, ``head`` alone, through the client.
    """

    head: tuple[Any, ...]
    tail: tuple[Any, ...] = ()
    call: bool = False


#: What a ladder receives for each Send: the reply, or the ResponseError it raised.
Reply = Any
Climb = Generator[Send, Reply, Any]


def _unknown_command(error: object) -> bool:
    return isinstance(error, ResponseError) and str(error).lower().startswith("unknown command")


def missing(error: object) -> bool:
    """Whether a call's error says its function (or script) is not on the server;
    then nothing ran."""
    if isinstance(error, NoScriptError):
        return True
    if type(error) is not ResponseError:
        return False
    text = str(error)
    return text.startswith("Function not found") or text.startswith("unknown command 'FCALL'")


def _result(reply: Reply) -> Any:
    if isinstance(reply, BaseException):
        raise reply
    return reply


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _entries(listing: Any) -> list[dict[str, Any]]:
    """The entries of a ``FUNCTION LIST`` reply (RESP2's flat pairs or RESP3's maps,
    bytes or decoded), each a dict by field name."""
    out = []
    for entry in listing or ():
        if isinstance(entry, Mapping):
            out.append({_text(k): v for k, v in entry.items()})
        else:
            items = list(entry)
            out.append({_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)})
    return out


def library_code(listing: Any, name: str) -> str | None:
    """The code of library ``name`` in a ``FUNCTION LIST ... WITHCODE`` reply; None
    when it is not listed."""
    for fields in _entries(listing):
        if _text(fields.get("library_name", "")) == name:
            code = fields.get("library_code")
            return None if code is None else _text(code)
    return None


@dataclass(slots=True)
class Ladder:
    """How one store reaches its functions (see the module's doc); no I/O.

    ``where`` names the server a call goes to: "" for a single server, the owner's
    ``host:port`` on a cluster, where each master the tenant's slot moves to is
    verified anew.
    """

    #: The library the calls use; None: scripts only (``functions=False``, or a
    #: server without Functions).
    library: LuaLibrary | None
    #: Servers the library was verified (or loaded) on.
    verified: set[str] = field(default_factory=set)
    #: Until when (monotonic s) calls send scripts: the library was missing and this
    #: user could not load it.
    scripts_until: float = 0.0
    #: Why the library could not be loaded, until the fallback was warned of.
    refused: str = ""
    warned: bool = False
    #: Verifications shared with the other stores over the same client.
    shared: dict[tuple[str, str], float] = field(default_factory=dict)

    def call(self, where: str, script: LuaScript) -> Climb:
        """The sends of one operation call, up to its reply (raised if an error)."""
        lib = self.library
        if lib is not None and time.monotonic() >= self.scripts_until:
            for _ in range(2):  # a library flushed again right after loading: scripts
                if where not in self.verified:
                    yield from self.verify(where)
                    if where not in self.verified or self.library is None:
                        break
                reply = yield Send(("FCALL", lib.functions[script.name]), call=True)
                if not missing(reply):
                    return _result(reply)
                if _unknown_command(reply):  # a server without Functions
                    self.library = None
                    break
                self.verified.discard(where)
                self.shared.clear()  # flushed or restarted: every store looks again
        reply = yield Send(("EVALSHA", script.sha), call=True)
        if isinstance(reply, NoScriptError):  # not cached: it never ran
            reply = yield Send(("EVAL", script.source), call=True)
        if isinstance(reply, NoPermissionError) and lib is not None:
            self.scripts_until, self.refused = 0.0, ""  # the next call looks again
            raise LibraryMissing(
                f"the Functions library {lib.name} is not loaded on the server, and this"
                f" store's user may neither load it nor send scripts; {HOW_TO_LOAD}"
                " (or agentplane_redis.acl.load_library)"
            ) from reply
        if self.refused and not self.warned and lib is not None:
            self.warned = True
            log.warning(
                "the Functions library %s is not loaded and this store's user may not load"
                " it (%s); sending scripts instead. %s",
                lib.name,
                self.refused,
                HOW_TO_LOAD[0].upper() + HOW_TO_LOAD[1:],
            )
        return _result(reply)

    def verify(self, where: str, again: bool = True) -> Climb:
        """Compares the library on the server with this release's, loading it where it
        is missing; marks ``where`` verified, or plans the fallback to scripts.

        Without ``again`` (a store's start-up), a verification that another store
        over the same client made less than ``VERIFIED_FOR_S`` ago holds."""
        lib = self.library
        if lib is None:
            return None
        self.verified.discard(where)
        seen = None if again else self.shared.get((where, lib.name))
        if seen is not None and time.monotonic() - seen < VERIFIED_FOR_S:
            self._verified(where)
            return None
        for _ in range(2):  # loaded by someone else between our look and our load
            listing = yield Send(("FUNCTION", "LIST", "LIBRARYNAME", lib.name, "WITHCODE"))
            if _unknown_command(listing):
                self.library = None
                return None
            if isinstance(listing, NoPermissionError):
                raise LibraryMismatch(
                    f"the Functions library {lib.name} cannot be compared with this release's"
                    " code: this store's user may not run FUNCTION LIST (grant"
                    " +function|list, as agentplane-redis acl does)"
                ) from listing
            code = library_code(_result(listing), lib.name)
            if code is not None:
                if code != lib.source:
                    self.shared.pop((where, lib.name), None)
                    raise LibraryMismatch(
                        f"the Functions library {lib.name} on the server is not the code this"
                        f" release ships: it was replaced. The store will not run it; {HOW_TO_LOAD}"
                        " (which replaces it), and deny FUNCTION to every other user"
                        " (docs/security.md)"
                    )
                self._verified(where, shared=True)
                return None
            loaded = yield Send(("FUNCTION", "LOAD", lib.source))
            if not isinstance(loaded, ResponseError):
                self._verified(where, shared=True)
                return None
            if "already exists" in str(loaded):
                continue
            if isinstance(loaded, ReadOnlyError):  # a replica: this call sends its script
                return None
            if _unknown_command(loaded):
                self.library = None
                return None
            if not isinstance(loaded, NoPermissionError):
                raise loaded  # the library's own error (it does not compile): a bug
            self.scripts_until, self.refused = time.monotonic() + SCRIPTS_FOR_S, str(loaded)
            return None
        return None

    def _verified(self, where: str, shared: bool = False) -> None:
        if shared and self.library is not None:
            self.shared[where, self.library.name] = time.monotonic()
        self.verified.add(where)
        self.scripts_until, self.refused, self.warned = 0.0, "", False


# ---------------------------------------------------------------- the start-up check


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


def version(info: Mapping[str, Any]) -> tuple[int, int]:
    if "valkey_version" in info:
        # Valkey reports redis_version 7.2.4 for compatibility and has WAITAOF.
        return (7, 2)
    major, minor, *_ = [*str(info.get("redis_version", "0.0")).split("."), "0"]
    return int(major), int(minor)


def has_waitaof(info: Mapping[str, Any]) -> bool:
    return version(info) >= (7, 2)


def has_functions(info: Mapping[str, Any]) -> bool:
    """Whether a server runs Redis Functions (Redis 7.0 and on, every Valkey)."""
    return version(info) >= (7, 0)


def online_replicas(info: Mapping[str, Any]) -> int:
    """Replicas past their initial sync: only they can acknowledge a write."""
    return sum(
        1
        for name, value in info.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


def plan_confirmation(info: Mapping[str, Any]) -> Confirmation:
    """The confirmation for a server, from ``INFO`` (server, persistence, replication).

    With AOF on (and ``WAITAOF``, Redis 7.2+ and Valkey): ``WAITAOF 1 <online
    replicas>``, which counts a replica once it has fsynced its own AOF, so
    replicas need ``appendonly yes`` too. Without AOF: ``WAIT <online replicas>``.
    """
    replicas = online_replicas(info)
    syncing = int(info.get("connected_slaves", 0)) - replicas
    waiting = f" ({syncing} replica(s) still in their initial sync)" if syncing > 0 else ""
    aof = bool(int(info.get("aof_enabled", 0)))
    if has_waitaof(info) and aof:
        return Confirmation(("WAITAOF", 1, replicas, CONFIRM_TIMEOUT_MS), 1, replicas)
    if replicas:
        return Confirmation(("WAIT", replicas, CONFIRM_TIMEOUT_MS), 0, replicas)
    if has_waitaof(info):
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

    #: "redis 7.0.15", "valkey 8.1.8", or "unknown" where neither INFO nor HELLO answers.
    server: str
    #: maxmemory-policy; None when the server does not say (a tenant's user: no INFO).
    eviction_policy: str | None
    appendonly: bool | None
    online_replicas: int | None
    #: How acknowledged writes are confirmed; None with durability="fast".
    confirmation: Confirmation | None
    #: On a cluster: ``host:port`` of the master serving the tenant (whose INFO this is).
    node: str | None = None
    #: The Functions library verified on that server; None where calls send scripts.
    library: str | None = None


def hello_info(hello: Mapping[Any, Any]) -> dict[str, Any]:
    """What ``HELLO`` tells of a server, in ``INFO``'s words (the rest left out)."""
    fields = {_text(k): v for k, v in hello.items()}
    server, number = _text(fields.get("server", "redis")), _text(fields.get("version", "0.0"))
    info: dict[str, Any] = {"redis_version": number}
    if server == "valkey":
        info["valkey_version"] = number
    info["cluster_enabled"] = int(_text(fields.get("mode", "")) == "cluster")
    return info


def read_info() -> Climb:
    """``INFO`` of the server; ``HELLO`` where INFO is refused (a tenant's user); None
    where both are (or unknown: fakeredis)."""
    info = yield Send(("INFO", *INFO_SECTIONS))
    if not isinstance(info, ResponseError):
        return dict(info)
    if not isinstance(info, NoPermissionError):
        return None
    hello = yield Send(("HELLO",))
    if isinstance(hello, ResponseError):
        return None
    return hello_info(hello)


def inspect_server(info: Mapping[str, Any] | None, durability: str) -> ServerCheck:
    """Refuses a server that would lose data or could not confirm; what was found."""
    if info is None or (durability == "acknowledged" and "aof_enabled" not in info):
        if durability == "acknowledged":
            raise DurabilityNotConfirmed(
                "durability='acknowledged' needs INFO to plan its confirmation, and the server"
                " refused it (a tenant's user may read it when created with agentplane-redis"
                " acl --grant-info; see docs/security.md)"
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
    aof = bool(int(info["aof_enabled"])) if "aof_enabled" in info else None
    replicas = online_replicas(info) if "connected_slaves" in info else None
    return ServerCheck(
        name, policy if isinstance(policy, str) else None, aof, replicas, confirmation
    )


# ---------------------------------------------------------------- administration


def masters(client: Any) -> list[Any]:
    """The sync client itself, or on a ``RedisCluster`` its own plain client of each
    master it knows."""
    if not isinstance(client, redis.RedisCluster):
        return [client]
    return [client.get_redis_connection(node) for node in client.get_primaries()]  # type: ignore[no-untyped-call]


def _node_name(node: Any) -> str:
    kwargs = node.connection_pool.connection_kwargs
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def verify_library(client: Any, lib: LuaLibrary | None = None) -> dict[str, str]:
    """This release's library on each master of a sync client's server: "ok",
    "missing", or "mismatch" (loaded under its name with other code)."""
    lib = lib or library()
    found: dict[str, str] = {}
    for node in masters(client):
        listing = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", lib.name, "WITHCODE")
        code = library_code(listing, lib.name)
        state = "missing" if code is None else "ok" if code == lib.source else "mismatch"
        found[_node_name(node)] = state
    return found


def install_library(client: Any, lib: LuaLibrary | None = None) -> dict[str, str]:
    """Loads this release's library on every master of a sync client's server (a
    slot may move to any of them), replacing a copy whose code is not this
    release's. What each master had: "ok" (verified, left), "loaded" or
    "replaced"."""
    lib = lib or library()
    done: dict[str, str] = {}
    for name, state in verify_library(client, lib).items():
        node = next(n for n in masters(client) if _node_name(n) == name)
        if state == "missing":
            try:
                node.execute_command("FUNCTION", "LOAD", lib.source)
            except ResponseError as error:
                if "already exists" not in str(error):
                    raise
                node.execute_command("FUNCTION", "LOAD", "REPLACE", lib.source)
            done[name] = "loaded"
        elif state == "mismatch":
            node.execute_command("FUNCTION", "LOAD", "REPLACE", lib.source)
            done[name] = "replaced"
        else:
            done[name] = "ok"
    return done


def load_library(client: Any) -> str:
    """Loads (or replaces, see ``install_library``) this release's library on the
    server of a sync client; returns its name."""
    lib = library()
    install_library(client, lib)
    return lib.name


def libraries(client: Any) -> list[str]:
    """The names of the agentplane libraries loaded on the server (on any master)."""
    found: set[str] = set()
    for node in masters(client):
        listing = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "agentplane_*")
        found.update(_text(fields["library_name"]) for fields in _entries(listing))
    return sorted(found)


def delete_library(client: Any, name: str) -> None:
    """Deletes one library on the server, on every master of a cluster."""
    for node in masters(client):
        try:
            node.execute_command("FUNCTION", "DELETE", name)
        except ResponseError as error:
            if "not found" not in str(error).lower():
                raise
