"""A per-tenant ACL user: exactly one tenant's keys, exactly the commands the store sends.

Redis checks ACLs inside scripts too, for keys and for commands, so the grant
names every command the scripts call (``SCRIPT_COMMANDS``; a test reads them
back out of ``lua/``) besides ``FCALL`` that calls the library's functions, and
``EVALSHA`` and ``EVAL`` that send scripts where the library is not loaded
(``EVAL`` with the source when the script cache misses), ``INFO`` for the start-up check,
``PING`` for health checks, and the confirmation of acknowledged writes for the
server's version (``WAITAOF`` from Redis 7.2 and on Valkey, ``WAIT`` before;
Redis 7.0 refuses a rule that names a command it does not have). On a
cluster, also what redis-py's cluster client sends to find its way
(``CLUSTER_COMMANDS``), and the user is created on every node, replicas
included, so that it holds after a failover. The user cannot load a library
(``FUNCTION LOAD`` would let one tenant replace the code every tenant runs):
``create_tenant_user`` loads it, on every master of a cluster. See
``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from . import scripts
from .errors import InvalidInput
from .keys import TenantKeys, validate_tenant

#: Every command a script calls (``redis.call``), in lower case.
SCRIPT_COMMANDS = (
    "hdel",
    "hexists",
    "hget",
    "hlen",
    "hmget",
    "hrandfield",
    "hset",
    "time",
    "zadd",
    "zcard",
    "zrange",
    "zrangebylex",
    "zrem",
    "zrevrange",
)
#: What the store itself sends, besides the scripts' own commands.
STORE_COMMANDS = ("evalsha", "eval", "info", "ping")
#: What redis-py's cluster clients send besides: the slot map, the command table
#: their key routing reads, and ASKING to follow a migrating slot.
CLUSTER_COMMANDS = ("cluster|slots", "cluster|shards", "cluster|nodes", "command", "asking")


def _has_waitaof(info: Mapping[str, Any]) -> bool:
    if "valkey_version" in info:
        return True
    major, minor = (int(x) for x in str(info.get("redis_version", "0.0")).split(".")[:2])
    return (major, minor) >= (7, 2)


def has_functions(info: Mapping[str, Any]) -> bool:
    """Whether a server runs Redis Functions (Redis 7.0 and on, every Valkey)."""
    if "valkey_version" in info:
        return True
    return int(str(info.get("redis_version", "0")).split(".")[0]) >= 7


def commands(info: Mapping[str, Any]) -> list[str]:
    """The commands a tenant's user needs on a server, from its ``INFO server`` (and
    ``cluster``: ``cluster_enabled``)."""
    confirm = ("wait", "waitaof") if _has_waitaof(info) else ("wait",)
    cluster = CLUSTER_COMMANDS if int(info.get("cluster_enabled", 0) or 0) else ()
    functions = ("fcall",) if has_functions(info) else ()
    return sorted((*SCRIPT_COMMANDS, *STORE_COMMANDS, *functions, *confirm, *cluster))


def rules(tenant: str, password: str, info: Mapping[str, Any]) -> list[str]:
    """The ``ACL SETUSER`` rules of a tenant's user: everything reset, then one key
    pattern, no channels, and exactly ``commands(info)``."""
    return [
        "reset",
        "on",
        *credentials(tenant, password),
        "-@all",
        *(f"+{c}" for c in commands(info)),
    ]


def server_info(client: Any) -> dict[str, Any]:
    """``INFO server`` and ``cluster`` of a client's server (on a cluster, of one node)."""
    return dict(client.info("server", "cluster"))


#: Keyword arguments of a cluster node's connection pool that belong to the cluster client.
_CLUSTER_ONLY = (
    "redis_connect_func",
    "oss_cluster_maint_notifications_handler",
    "orig_host_address",
    "orig_socket_timeout",
    "orig_socket_connect_timeout",
    "host",
    "port",
)


def every_node(client: Any) -> list[Any]:
    """On a redis-py ``RedisCluster``: a plain client of every node ``CLUSTER NODES``
    lists (masters and replicas, failed ones left out), with the cluster client's
    credentials and timeouts. Close them after use."""
    default = client.get_redis_connection(client.get_default_node())
    pool = default.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in _CLUSTER_ONLY}
    text = default.execute_command("CLUSTER", "NODES")
    text = text.decode() if isinstance(text, bytes) else str(text)
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or {"fail", "noaddr", "handshake"} & set(fields[2].split(",")):
            continue
        host, _, port = fields[1].split("@")[0].rpartition(":")
        nodes.append(
            redis.Redis(
                connection_pool=redis.ConnectionPool(
                    connection_class=pool.connection_class,
                    host=host or pool.connection_kwargs["host"],
                    port=int(port),
                    **kwargs,
                )
            )
        )
    return nodes


def credentials(tenant: str, password: str) -> list[str]:
    """The password, key and channel rules of a tenant's user (validated, no I/O)."""
    if not isinstance(password, str) or not password or any(c.isspace() for c in password):
        raise InvalidInput("the password must be a non-empty str without white space")
    name = validate_tenant(tenant)
    if " " in name:
        # Redis refuses a key rule with a space, and `?` in its place would match
        # other tenants too: no exact pattern exists.
        raise InvalidInput(
            "an ACL key pattern cannot hold a space, so tenant"
            f" {name!r} cannot have a user of its own; use a tenant name without spaces"
        )
    return [f">{password}", TenantKeys(name).acl_pattern(), "resetchannels"]


def default_username(tenant: str) -> str:
    """``agentplane-<tenant>``; a tenant with white space needs a username given."""
    name = f"agentplane-{validate_tenant(tenant)}"
    if any(c.isspace() for c in name):
        raise InvalidInput("ACL usernames cannot hold white space: give a username")
    return name


def create_tenant_user(client: Any, tenant: str, password: str, username: str | None = None) -> str:
    """Creates (or resets) the ACL user of one tenant on the server of a sync redis-py
    client, which must be allowed ``ACL SETUSER`` (and ``FUNCTION LOAD``: the
    package's library is loaded too, see ``load_library``); returns the username."""
    name = default_username(tenant) if username is None else username
    if not name or any(c.isspace() or c == "\x00" for c in name):
        raise InvalidInput("ACL usernames cannot be empty or hold white space")
    info = server_info(client)
    granted = rules(tenant, password, info)
    if not isinstance(client, redis.RedisCluster):
        client.execute_command("ACL", "SETUSER", name, *granted)
    else:
        for node in every_node(client):
            with node:
                node.execute_command("ACL", "SETUSER", name, *granted)
    if has_functions(info):
        load_library(client)
    return name


def load_library(client: Any) -> str:
    """Loads the package's Functions library (``scripts.library()``) with ``FUNCTION
    LOAD`` on the server of a sync redis-py client, on every master of a cluster;
    a library already loaded stays. Returns the library's name."""
    library = scripts.library()
    for node in masters(client):
        try:
            node.execute_command("FUNCTION", "LOAD", library.source)
        except redis.ResponseError as error:
            if "already exists" not in str(error):
                raise
    return library.name


def libraries(client: Any) -> list[str]:
    """The names of the agentplane libraries loaded on the server (on any master)."""
    found: set[str] = set()
    for node in masters(client):
        for entry in node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "agentplane_*"):
            name = entry[b"library_name"] if isinstance(entry, dict) else entry[1]
            found.add(name.decode() if isinstance(name, bytes) else str(name))
    return sorted(found)


def delete_library(client: Any, name: str) -> None:
    """Deletes one library on the server, on every master of a cluster."""
    for node in masters(client):
        try:
            node.execute_command("FUNCTION", "DELETE", name)
        except redis.ResponseError as error:
            if "not found" not in str(error).lower():
                raise


def masters(client: Any) -> list[Any]:
    """The sync client itself, or on a ``RedisCluster`` its own plain client of each
    master it knows."""
    if not isinstance(client, redis.RedisCluster):
        return [client]
    return [client.get_redis_connection(node) for node in client.get_primaries()]  # type: ignore[no-untyped-call]
