"""The operator CLI, ``agentplane-redis`` (also ``python -m agentplane_redis``).

A thin skin over the stores: parse, call, render. Every error prints one line
and exits with the code ``EXIT_CODES`` gives its class, never a traceback.
"""

from __future__ import annotations

import functools
import json
import secrets
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, NoReturn, TypeVar

import click
import redis

from . import acl
from .errors import (
    AgentplaneRedisError,
    DurabilityNotConfirmed,
    InvalidInput,
    ServerMisconfigured,
)
from .store import RedisStore, client_options

F = TypeVar("F", bound=Callable[..., Any])

EXIT_REFUSED = 2  # refused input (also click's usage errors)
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_SERVER = 5  # the server refused or cannot serve the store

#: Exception class -> exit code; the first that matches wins.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (InvalidInput, EXIT_REFUSED),
    (redis.exceptions.ConnectionError, EXIT_UNREACHABLE),
    (redis.exceptions.TimeoutError, EXIT_UNREACHABLE),
    (ServerMisconfigured, EXIT_SERVER),
    (DurabilityNotConfirmed, EXIT_SERVER),
    (redis.exceptions.ResponseError, EXIT_SERVER),
    (AgentplaneRedisError, 1),
)


def fail(error: BaseException) -> NoReturn:
    code = next((c for cls, c in EXIT_CODES if isinstance(error, cls)), 1)
    click.echo(f"agentplane-redis: {type(error).__name__}: {error}", err=True)
    sys.exit(code)


class Context:
    def __init__(self, url: str, tenant: str, as_json: bool) -> None:
        self.url, self.tenant, self.as_json = url, tenant, as_json

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, **client_options())

    def store(self) -> RedisStore:
        return RedisStore(self.client(), tenant=self.tenant)

    def emit(self, data: dict[str, Any], text: str) -> None:
        click.echo(json.dumps(data, sort_keys=True) if self.as_json else text)


@click.group()
@click.option(
    "--url",
    envvar="AGENTPLANE_REDIS_URL",
    default="redis://localhost:6379/0",
    show_default=True,
    help="Redis URL (or AGENTPLANE_REDIS_URL).",
)
@click.option(
    "--tenant",
    envvar="AGENTPLANE_TENANT",
    default="default",
    show_default=True,
    help="Tenant (or AGENTPLANE_TENANT).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def main(ctx: click.Context, url: str, tenant: str, as_json: bool) -> None:
    """Inspect and operate agentplane-redis stores."""
    ctx.obj = Context(url, tenant, as_json)


def guarded(fn: F) -> F:
    """Runs a command body, turning every library or server error into one line."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (AgentplaneRedisError, redis.exceptions.RedisError) as error:
            fail(error)

    return wrapper  # type: ignore[return-value]


@main.command()
@click.pass_obj
@guarded
def check(obj: Context) -> None:
    """Check the server: eviction policy, persistence, replicas."""
    found = obj.store().check()
    data = asdict(found)
    data.pop("confirmation")
    lines = [f"{k}: {v}" for k, v in data.items()]
    obj.emit(data, "\n".join(lines) + "\nok: the server can serve the store")


@main.command(name="acl")
@click.option("--user", "username", help="ACL username [agentplane-<tenant>].")
@click.option(
    "--password",
    envvar="AGENTPLANE_ACL_PASSWORD",
    help="The user's password (or AGENTPLANE_ACL_PASSWORD); generated if left out.",
)
@click.option("--dry-run", is_flag=True, help="Print the ACL SETUSER command; change nothing.")
@click.pass_obj
@guarded
def acl_command(obj: Context, username: str | None, password: str | None, dry_run: bool) -> None:
    """Create (or reset) the ACL user of --tenant: only its keys, only the store's commands."""
    generated = password is None
    password = password or secrets.token_urlsafe(24)
    name = acl.default_username(obj.tenant) if username is None else username
    acl.credentials(obj.tenant, password)  # refused input never reaches the server
    client = obj.client()
    rules = acl.rules(obj.tenant, password, client.info("server"))
    if not dry_run:
        name = acl.create_tenant_user(client, obj.tenant, password, name)
    command = shlex.join(["ACL", "SETUSER", name, *rules])
    data = {"user": name, "tenant": obj.tenant, "rules": rules, "created": not dry_run}
    if generated:
        data["password"] = password
    text = command if dry_run else f"created ACL user {name!r} for tenant {obj.tenant!r}"
    if generated and not dry_run:
        text += f"\npassword: {password}"
    obj.emit(data, text)
