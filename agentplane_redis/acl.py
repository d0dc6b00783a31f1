"""A per-tenant ACL user: exactly one tenant's keys, exactly the commands the store sends.

Redis checks ACLs inside scripts too, for keys and for commands, so the grant
names every command the library's functions call (``SCRIPT_COMMANDS``; a test
reads them back out of ``lua/``) besides ``FCALL`` that calls them, ``FUNCTION
LIST`` that the start-up check compares the loaded library with (``server.py``),
``HELLO`` for the start-up check's server version, ``PING`` for health checks,
and the confirmation of acknowledged writes for the server's version
(``WAITAOF`` from Redis 7.2 and on Valkey, ``WAIT`` before; Redis 7.0 refuses a
rule that names a command it does not have). On a cluster, also what redis-py's
cluster client sends to find its way (``CLUSTER_COMMANDS``), and the user is
created on every node, replicas included, so that it holds after a failover.

Nothing in the grant runs code of the tenant's choosing: no ``EVAL``,
``EVALSHA``, ``SCRIPT`` or ``FUNCTION LOAD`` (a loop in any Lua the tenant could
send would stall the server for every tenant, unkillably once it has written;
a library it could load would run inside every tenant's calls). The
administrator loads the library (``create_tenant_user`` does, on every master of
a cluster; so does ``agentplane-redis library``). Nor does the grant hold
``INFO``, which shows every tenant's key counts, every client and every
command's statistics: ``grant_info=True`` adds it for a store with
``durability="acknowledged"``, which plans its confirmation from it. See
``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from .errors import InvalidInput
from .keys import TenantKeys, validate_tenant
from .server import (
    delete_library,
    has_functions,
    has_waitaof,
    install_library,
    libraries,
    load_library,
    masters,
    verify_library,
)

__all__ = [
    "CLUSTER_COMMANDS",
    "SCRIPT_COMMANDS",
    "STORE_COMMANDS",
    "commands",
    "create_tenant_user",
    "credentials",
    "default_username",
    "delete_library",
    "every_node",
    "has_functions",
    "install_library",
    "libraries",
    "load_library",
    "masters",
    "rules",
    "server_info",
    "verify_library",
]

#: Every command a script calls (``redis.call``), in lower case.
SCRIPT_COMMANDS = (
    "get",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hlen",
    "hmget",
    "hscan",
    "hset",
    "hsetnx",
    "hstrlen",
    "incrby",
    "lpush",
    "ltrim",
    "rename",
    "time",
    "unlink",
    "zadd",
    "zcard",
    "zcount",
    "zmscore",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrank",
    "zrem",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zscore",
)
#: What the store itself sends, besides the functions' own commands: the calls, the
#: start-up check (the library's code, the server's version), health checks, and a
#: worker's wait for a wake (``timers.wait_for_wake``).
STORE_COMMANDS = ("blpop", "fcall", "function|list", "hello", "ping")
#: What redis-py's cluster clients send besides: the slot map, the command table
#: their key routing reads, and ASKING to follow a migrating slot.
CLUSTER_COMMANDS = ("cluster|slots", "cluster|shards", "cluster|nodes", "command", "asking")


def commands(info: Mapping[str, Any], grant_info: bool = False) -> list[str]:
    """The commands a tenant's user needs on a server, from its ``INFO server`` (and
    ``cluster``: ``cluster_enabled``); with ``grant_info``, ``INFO`` too."""
    confirm = ("wait", "waitaof") if has_waitaof(info) else ("wait",)
    cluster = CLUSTER_COMMANDS if int(info.get("cluster_enabled", 0) or 0) else ()
    extra = ("info",) if grant_info else ()
    return sorted((*SCRIPT_COMMANDS, *STORE_COMMANDS, *confirm, *cluster, *extra))


def rules(
    tenant: str, password: str, info: Mapping[str, Any], grant_info: bool = False
) -> list[str]:
    """The ``ACL SETUSER`` rules of a tenant's user: everything reset, then one key
    pattern, no channels, and exactly ``commands(info, grant_info)``."""
    return [
        "reset",
        "on",
        *credentials(tenant, password),
        "-@all",
        *(f"+{c}" for c in commands(info, grant_info)),
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


def create_tenant_user(
    client: Any,
    tenant: str,
    password: str,
    username: str | None = None,
    *,
    grant_info: bool = False,
) -> str:
    """Creates (or resets) the ACL user of one tenant on the server of a sync redis-py
    client, which must be allowed ``ACL SETUSER`` (and ``FUNCTION LOAD``: the
    package's library is loaded too, see ``load_library``); returns the username."""
    name = default_username(tenant) if username is None else username
    if not name or any(c.isspace() or c == "\x00" for c in name):
        raise InvalidInput("ACL usernames cannot be empty or hold white space")
    info = server_info(client)
    granted = rules(tenant, password, info, grant_info)
    if not isinstance(client, redis.RedisCluster):
        client.execute_command("ACL", "SETUSER", name, *granted)
    else:
        for node in every_node(client):
            with node:
                node.execute_command("ACL", "SETUSER", name, *granted)
    if has_functions(info):
        load_library(client)
    return name
