"""A per-tenant ACL user: exactly one tenant's keys, exactly the commands the store sends.

Redis checks ACLs inside scripts too, for keys and for commands, so the grant
names every command the scripts call (``SCRIPT_COMMANDS``; a test reads them
back out of ``lua/``) besides ``EVALSHA`` and ``EVAL`` that send them (``EVAL``
with the source when the script cache misses), ``INFO`` for the start-up check,
``PING`` for health checks, and the confirmation of acknowledged writes for the
server's version (``WAITAOF`` from Redis 7.2 and on Valkey, ``WAIT`` before;
Redis 7.0 refuses a rule that names a command it does not have). See
``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidInput
from .keys import TenantKeys, validate_tenant

#: Every command a script calls (``redis.call``), in lower case.
SCRIPT_COMMANDS = (
    "hdel",
    "hexists",
    "hget",
    "hlen",
    "hmget",
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


def _has_waitaof(info: Mapping[str, Any]) -> bool:
    if "valkey_version" in info:
        return True
    major, minor = (int(x) for x in str(info.get("redis_version", "0.0")).split(".")[:2])
    return (major, minor) >= (7, 2)


def commands(info: Mapping[str, Any]) -> list[str]:
    """The commands a tenant's user needs on a server, from its ``INFO server``."""
    confirm = ("wait", "waitaof") if _has_waitaof(info) else ("wait",)
    return sorted((*SCRIPT_COMMANDS, *STORE_COMMANDS, *confirm))


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
    client, which must be allowed ``ACL SETUSER``; returns the username."""
    name = default_username(tenant) if username is None else username
    if not name or any(c.isspace() or c == "\x00" for c in name):
        raise InvalidInput("ACL usernames cannot be empty or hold white space")
    client.execute_command("ACL", "SETUSER", name, *rules(tenant, password, client.info("server")))
    return name
