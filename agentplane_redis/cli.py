"""The operator CLI, ``agentplane-redis`` (also ``python -m agentplane_redis``).

A thin skin over the stores: parse, call, render. Every error prints one line
and exits with the code ``EXIT_CODES`` gives its class, never a traceback.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import json
import logging
import secrets
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NoReturn, TypeVar

import click
import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from . import acl, codec, server
from .errors import (
    AgentplaneRedisError,
    DurabilityNotConfirmed,
    InvalidInput,
    LibraryError,
    ServerMisconfigured,
)
from .keys import (
    PREFIX,
    Geometry,
    instant_member,
    locate_event,
    locate_timer,
    locate_wait,
    shell_word,
    timer_attrs,
)
from .model import DeadLetter, Resumed, Subscription, Timer
from .scripts import catalogue
from .scripts import library as this_release
from .store import RedisStore, client_for_url
from .views import duration, event_filter, filtered, has_keys, wait_filter

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
    (LibraryError, EXIT_SERVER),
    (redis.exceptions.ResponseError, EXIT_SERVER),
    (AgentplaneRedisError, 1),
)


def fail(error: BaseException) -> NoReturn:
    code = next((c for cls, c in EXIT_CODES if isinstance(error, cls)), 1)
    click.echo(f"agentplane-redis: {type(error).__name__}: {error}", err=True)
    sys.exit(code)


def connect(url: str) -> Any:
    """The client every command uses: ``RedisCluster`` for a cluster node's URL,
    ``Redis`` otherwise (tests put a fakeredis client here)."""
    return client_for_url(url)


class Context:
    def __init__(self, url: str, tenant: str, as_json: bool, url_given: bool = False) -> None:
        self.url, self.tenant, self.as_json = url, tenant, as_json
        #: Whether --url or AGENTPLANE_REDIS_URL named the server (not the default).
        self.url_given = url_given

    def client(self) -> Any:
        try:
            return connect(self.url)
        except (ValueError, TypeError) as error:  # redis-py's reading of the URL
            raise InvalidInput(f"--url {self.url!r}: {error}") from None

    def store(self) -> RedisStore:
        """The tenant's store; a warning on stderr where the tenant has no keys on the
        server at all (a misspelled --tenant reads as zeros otherwise)."""
        store = RedisStore(self.client(), tenant=self.tenant)
        if not has_keys(store):
            click.echo(
                f"agentplane-redis: warning: tenant {store.tenant!r} has no keys on this"
                " server (a misspelled --tenant?)",
                err=True,
            )
        return store

    def emit(self, data: dict[str, Any], text: str) -> None:
        click.echo(json.dumps(data, sort_keys=True) if self.as_json else text)


#: The group's own options, which are accepted after the command too.
GLOBAL_VALUED, GLOBAL_FLAGS = ("--url", "--tenant"), ("--json",)


def globals_first(args: list[str]) -> list[str]:
    """The arguments with every global option (and its value) moved before the
    command, so ``agentplane-redis dead-letters --json`` means what
    ``agentplane-redis --json dead-letters`` does. Nothing after ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest += args[i:]
            break
        if arg in GLOBAL_FLAGS or (name in GLOBAL_VALUED and "=" in arg):
            front.append(arg)
        elif name in GLOBAL_VALUED and i + 1 < len(args):
            front += [arg, args[i + 1]]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


class MainGroup(click.Group):
    """The command group, taking its own options before or after the command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, globals_first(args))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("agentplane-redis")
    except PackageNotFoundError:
        return "unknown (not installed)"


@click.group(cls=MainGroup)
@click.version_option(
    version=_version(), prog_name="agentplane-redis", message="%(prog)s %(version)s"
)
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
    """Inspect and operate agentplane-redis stores.

    The options above are accepted before or after the command."""
    given = ctx.get_parameter_source("url") not in (None, click.core.ParameterSource.DEFAULT)
    ctx.obj = Context(url, tenant, as_json, url_given=given)


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
    store = RedisStore(obj.client(), tenant=obj.tenant)  # the server's, whatever the tenant
    found = store.check()
    data = asdict(found)
    data.pop("confirmation")
    data["persistence"] = persistence(store.client, found.appendonly)
    warning = PERSISTENCE_WARNINGS.get(data["persistence"])
    data["verdict"] = "warning" if warning else "ok"
    lines = [f"{k}: {v}" for k, v in data.items() if k != "verdict"]
    said = f"warning: {warning}" if warning else "ok: the server can serve the store"
    obj.emit(data, "\n".join([*lines, said]))


#: What ``check`` says of a server by how it persists (``persistence``).
PERSISTENCE_WARNINGS = {
    "none": "the server persists nothing (no AOF, no snapshots): a restart loses every"
    " timer, wait and event; turn on appendonly (docs/reliability.md)",
    "snapshots": "the server only snapshots: a crash loses the writes since the last"
    " snapshot; turn on appendonly (docs/reliability.md)",
}


def persistence(client: Any, appendonly: bool | None) -> str:
    """How the server keeps data across a restart: "aof", "snapshots", "none", or
    "unknown" where it does not say (a tenant's user may read neither INFO nor CONFIG)."""
    if appendonly:
        return "aof"
    try:
        save = client.config_get("save").get("save")
    except (redis.exceptions.RedisError, AttributeError):
        return "unknown"
    if save is None or appendonly is None:
        return "unknown"
    return "snapshots" if str(save).strip() else "none"


@main.command(name="acl")
@click.option("--user", "username", help="ACL username [agentplane-<tenant>].")
@click.option(
    "--password",
    envvar="AGENTPLANE_ACL_PASSWORD",
    help="The user's password (or AGENTPLANE_ACL_PASSWORD); generated if left out.",
)
@click.option("--dry-run", is_flag=True, help="Print the ACL SETUSER command; change nothing.")
@click.option(
    "--grant-info",
    is_flag=True,
    help="Also grant INFO (server-wide state), which durability='acknowledged' needs.",
)
@click.option("--yes", is_flag=True, help="Reset an existing user without asking.")
@click.pass_obj
@guarded
def acl_command(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    username: str | None,
    password: str | None,
    dry_run: bool,
    grant_info: bool,
    yes: bool,
) -> None:
    """Create (or reset) the ACL user of --tenant: only its keys, only the store's commands."""
    generated = password is None
    password = password or secrets.token_urlsafe(24)
    name = acl.default_username(obj.tenant) if username is None else username
    acl.credentials(obj.tenant, password)  # refused input never reaches the server
    client = obj.client()
    rules = acl.rules(obj.tenant, password, acl.server_info(client), grant_info)
    if not dry_run and user_exists(client, name):
        confirm(
            yes,
            f"ACL user {name!r} exists: reset it (its password too, which locks out"
            " every worker still using the old one)?",
        )
    if not dry_run:
        name = acl.create_tenant_user(client, obj.tenant, password, name, grant_info=grant_info)
    command = shlex.join(["ACL", "SETUSER", name, *rules])
    data = {"user": name, "tenant": obj.tenant, "rules": rules, "created": not dry_run}
    if generated:
        data["password"] = password
    text = command if dry_run else f"created ACL user {name!r} for tenant {obj.tenant!r}"
    if generated and not dry_run:
        text += f"\npassword: {password}"
    obj.emit(data, text)


def user_exists(client: Any, name: str) -> bool:
    """Whether the server has the ACL user (False where it cannot tell)."""
    try:
        return client.execute_command("ACL", "GETUSER", name) is not None
    except (redis.exceptions.RedisError, AttributeError, IndexError, TypeError):
        return False


# ---------------------------------------------------------------- rendering


def plain(value: Any) -> Any:
    """A result as JSON data: dataclasses by their fields, instants as ISO 8601 (UTC)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def keys_text(correlation: Any) -> str:
    return ", ".join(f"{k.namespace}/{k.value}" for k in correlation)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    out = Table(title=title)
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*("" if v is None else str(v) for v in row))
    return out


def render_subscriptions(title: str, subs: list[Subscription]) -> Table:
    return table(
        title,
        ["run", "effect", "kind", "keys", "step", "phase", "from"],
        [
            [
                s.run,
                s.effect,
                s.kind,
                keys_text(s.correlation),
                s.step,
                s.phase.value,
                s.from_source,
            ]
            for s in subs
        ],
    )


def when(value: datetime | None) -> str:
    """An instant in a table: UTC, to the second (``--json`` and ``show`` keep it whole)."""
    return "" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def render_timers(title: str, timers: list[Timer]) -> Table:
    return table(
        title,
        ["run", "effect", "fires at (UTC)", "step", "phase", "case"],
        [[t.run, t.effect, when(t.fire_at), t.step, t.phase.value, t.case] for t in timers],
    )


def render_dead_letters(letters: list[DeadLetter], total: int | None = None) -> Table:
    counted = "" if total is None else f" ({len(letters)} of {total})"
    return table(
        f"dead letters, newest first{counted}",
        ["source", "id", "kind", "received (UTC)", "reason", "keys"],
        [
            [
                d.event.source,
                d.event.id,
                d.event.kind,
                when(d.received_at),
                d.reason,
                keys_text(d.event.correlation),
            ]
            for d in letters
        ],
    )


def show(obj: Context, data: Any, rendered: Any) -> None:
    """Prints a result: its JSON with --json, else the rendering (a table or text)."""
    if obj.as_json:
        click.echo(json.dumps(plain(data), sort_keys=True, ensure_ascii=False))
    else:
        Console().print(rendered)


def confirm(yes: bool, what: str) -> None:
    if not yes and not click.confirm(what, default=False, err=True):
        click.echo("agentplane-redis: nothing done", err=True)
        sys.exit(1)


def not_found(what: str) -> NoReturn:
    click.echo(f"agentplane-redis: not found: {what}", err=True)
    sys.exit(EXIT_NOT_FOUND)


#: The most dead letters one ``dead-letters revive --all`` takes on.
MAX_REVIVE = 100_000

limit_option = click.option("--limit", default=100, show_default=True, type=click.IntRange(min=0))
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


# ---------------------------------------------------------------- reading


@main.command()
@click.pass_obj
@guarded
def stats(obj: Context) -> None:
    """Counts of the tenant's events, waits and timers."""
    store = obj.store()
    counts = store.events.stats()
    data = {
        **plain(counts),
        "timers": store.timers.pending_count(),
        "next_due": plain(store.timers.next_due()),
        "oldest_live": plain(store.events.oldest_live()),
    }
    show(
        obj, data, table(f"tenant {obj.tenant!r}", ["", "count"], [[k, v] for k, v in data.items()])
    )


def key_arg(key: str | None) -> str | None:
    """A --key option: namespace/value, or refused."""
    if key is not None and "/" not in key:
        raise InvalidInput(f"--key {key!r} is not namespace/value")
    return key


def options(*stack: Callable[[F], F]) -> Callable[[F], F]:
    """The options of ``stack`` as one decorator, in the order given."""

    def apply(fn: F) -> F:
        for option in reversed(stack):
            fn = option(fn)
        return fn

    return apply


with_filters = options(
    click.option("--key", help="Only events with this correlation key, namespace/value."),
    click.option("--kind", help="Only events of this kind."),
    click.option("--source", help="Only events from this source."),
)
#: The cursor and filters of a listing of waits.
wait_listing = options(
    click.option("--after", help="The cursor a previous page printed: list what comes after it."),
    click.option("--key", help="Only waits on this correlation key, namespace/value."),
    click.option("--kind", help="Only waits for this kind of event."),
    click.option("--source", help="Only waits restricted to this source."),
)


@main.group("dead-letters", invoke_without_command=True)
@limit_option
@click.option("--after", help="The cursor a previous page printed: list what comes after it.")
@with_filters
@click.pass_context
@guarded
def dead_letters(  # noqa: PLR0917 - click passes every option as an argument
    ctx: click.Context,
    limit: int,
    after: str | None,
    key: str | None,
    kind: str | None,
    source: str | None,
) -> None:
    """Dead letters, newest first ("N of TOTAL", and the cursor of the next page);
    or, with a command, act on them."""
    if ctx.invoked_subcommand is not None:
        return
    obj = ctx.obj
    store = obj.store()
    matches = event_filter(key_arg(key), kind, source)
    letters, cursor = filtered(store.events.dead_letters_page, matches, limit, after)
    total = store.events.stats().dead
    if obj.as_json:
        show(obj, {"dead_letters": letters, "total": total, "next": cursor}, None)
        return
    show(obj, letters, render_dead_letters(letters, total))
    if cursor is not None:
        click.echo(f"more: --after {shlex.quote(cursor)}")


@dead_letters.command("revive")
@click.argument("source", required=False)
@click.argument("event_id", required=False)
@click.option("--all", "every", is_flag=True, help="Every dead letter the filters match.")
@click.option("--key", help="Only events with this correlation key, namespace/value.")
@click.option("--kind", help="Only events of this kind.")
@click.option("--source", "source_filter", help="Only events from this source.")
@yes_option
@click.pass_obj
@guarded
def dead_letters_revive(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    source: str | None,
    event_id: str | None,
    every: bool,
    key: str | None,
    kind: str | None,
    source_filter: str | None,
    yes: bool,
) -> None:
    """Bring dead letters back to live (matched as deliver matches): SOURCE ID for one,
    or --all with --key, --kind and --source for every one they match."""
    store = obj.store()
    if not every:
        if source is None or event_id is None:
            raise InvalidInput("give SOURCE ID, or --all (with filters)")
        outcome = store.events.revive(source, event_id)
        if outcome is None:
            not_found(f"dead letter ({source!r}, {event_id!r})")
        said = "resumed a waiting run" if isinstance(outcome, Resumed) else "live, buffered"
        obj.emit(
            {"source": source, "id": event_id, "outcome": type(outcome).__name__.lower()},
            f"revived ({source!r}, {event_id!r}): {said}",
        )
        return
    if source is not None or event_id is not None:
        raise InvalidInput("--all takes filters (--key, --kind, --source), not SOURCE ID")
    matches = event_filter(key_arg(key), kind, source_filter)
    letters, _ = filtered(store.events.dead_letters_page, matches, MAX_REVIVE, None)
    if not letters:
        obj.emit({"revived": 0, "resumed": 0}, "no dead letter matches")
        return
    confirm(yes, f"Revive {len(letters)} dead letters (each matched as a delivery)?")
    done = {"revived": 0, "resumed": 0}

    def work() -> dict[str, int]:
        for letter in letters:
            outcome = store.events.revive(letter.event.source, letter.event.id)
            done["revived"] += outcome is not None
            done["resumed"] += isinstance(outcome, Resumed)
        return done

    with_progress(obj, "reviving", len(letters), lambda: done["revived"], work)
    obj.emit(done, f"revived {done['revived']} dead letters; {done['resumed']} resumed a run")


def list_waits(  # noqa: PLR0917 - the listing's page, names and the command's options
    obj: Context,
    page: Callable[[int, str | None], tuple[list[Subscription], str | None]],
    total: int,
    names: tuple[str, str],
    title: Callable[[int], str],
    limit: int,
    after: str | None,
    matches: Callable[[Subscription], bool],
) -> None:
    """One page of waits, filtered: under ``--json`` as ``{names[0]: found, names[1]:
    total, "next": cursor}``, else as a table under ``title(rows)`` and the next cursor."""
    found, next_cursor = filtered(page, matches, limit, after)
    if obj.as_json:
        show(obj, {names[0]: found, names[1]: total, "next": next_cursor}, None)
        return
    show(obj, found, render_subscriptions(title(len(found)), found))
    if next_cursor is not None:
        # (a cursor inside a wait's key rows holds a line end: bash's $'...' keeps it)
        word = shlex.quote(next_cursor) if next_cursor.isprintable() else shell_word(next_cursor)
        click.echo(f"more: --after {word}")


@main.command()
@limit_option
@wait_listing
@click.pass_obj
@guarded
def waiting(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    limit: int,
    after: str | None,
    key: str | None,
    kind: str | None,
    source: str | None,
) -> None:
    """Wait key rows, in registration order ("N of W waits", and the next page's cursor)."""
    store = obj.store()
    matches = wait_filter(key_arg(key), kind, source)
    total = store.events.stats().waits
    list_waits(
        obj,
        store.events.waiting_page,
        total,
        ("waiting", "waits"),
        lambda n: f"waiting ({n} rows; {total} waits)",
        limit,
        after,
        matches,
    )


@main.command()
@limit_option
@wait_listing
@click.pass_obj
@guarded
def parked(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    limit: int,
    after: str | None,
    key: str | None,
    kind: str | None,
    source: str | None,
) -> None:
    """Parked waits (those awaiting redelivery), in (run, effect) order."""
    store = obj.store()
    matches = wait_filter(key_arg(key), kind, source)
    total = store.events.stats().parked
    list_waits(
        obj,
        store.events.parked_waits_page,
        total,
        ("parked", "total"),
        lambda n: f"parked waits ({n} of {total})",
        limit,
        after,
        matches,
    )


@main.group(invoke_without_command=True)
@click.option("--run", help="Only this run's timers, in effect order.")
@limit_option
@click.option("--after", help="The cursor a previous page printed: list what comes after it.")
@click.pass_context
@guarded
def timers(ctx: click.Context, run: str | None, limit: int, after: str | None) -> None:
    """Armed timers, soonest first (or one run's), and when the next is due; or, with
    a command, change one timer."""
    if ctx.invoked_subcommand is not None:
        return
    obj = ctx.obj
    store = obj.store()
    cursor = None
    if run is not None:
        found = store.timers.armed(run)[:limit]
    else:
        found, cursor = store.timers.pending_page(limit, after)
    if run is not None and not found:
        not_found(f"timers of run {run!r}")
    due, total = store.timers.next_due(), store.timers.pending_count()
    if obj.as_json:
        show(obj, {"timers": found, "next_due": due, "total": total, "next": cursor}, None)
        return
    title = f"timers ({len(found)} of {total}; next due {when(due) or 'never'})"
    show(obj, found, render_timers(title, found))
    if cursor is not None:
        click.echo(f"more: --after {shlex.quote(cursor)}")


@main.command()
@click.pass_obj
@guarded
def tenants(obj: Context) -> None:
    """The tenants on the server (found with SCAN, never KEYS)."""
    names = tenants_on(obj.client())
    show(obj, names, table("tenants", ["tenant"], [[n] for n in names]))


@main.command()
@click.pass_obj
@guarded
def scripts(obj: Context) -> None:
    """Load every script on the server and print its SHA."""
    client = obj.client()
    loaded = {name: client.script_load(s.source) for name, s in sorted(catalogue().items())}
    show(obj, loaded, table("scripts", ["script", "sha1"], [[k, v] for k, v in loaded.items()]))


@main.command()
@click.option(
    "--delete-others",
    is_flag=True,
    help="Delete the libraries of other releases (once none of their workers runs).",
)
@click.option("--yes", is_flag=True, help="Delete them without asking.")
@click.pass_obj
@guarded
def library(obj: Context, delete_others: bool, yes: bool) -> None:
    """Load (or verify) this release's Functions library and list the releases' libraries.

    A library of this release's name whose code is not this release's (replaced by
    someone allowed FUNCTION LOAD) is replaced, and said so."""
    client = obj.client()
    name = this_release().name
    states = server.install_library(client)
    found = acl.libraries(client)
    others = [other for other in found if other != name]
    if delete_others and others:
        confirm(
            yes,
            f"delete {len(others)} other librar{'y' if len(others) == 1 else 'ies'}"
            f" ({', '.join(others)})? Workers of those releases fail until they are upgraded",
        )
        for other in others:
            acl.delete_library(client, other)
    said = {
        "ok": "verified",
        "loaded": "loaded",
        "replaced": "replaced (its code was not this release's)",
    }
    here = ", ".join(sorted({said[state] for state in states.values()}))
    rows = [
        [n, f"this release: {here}" if n == name else ("deleted" if delete_others else "")]
        for n in found
    ]
    data = {
        "library": name,
        "nodes": {node: said[state].split(" ")[0] for node, state in states.items()},
        "others": others,
        "deleted": others if delete_others else [],
    }
    show(obj, data, table("libraries", ["library", ""], rows))


@main.group("show")
def show_group() -> None:
    """One event, wait or timer, decoded."""


def labelled(data: dict[str, Any], prefix: str = "") -> list[list[Any]]:
    """A record's fields as (label, value) rows: nested records flattened under
    dotted labels, correlation keys as namespace/value, a payload as indented JSON."""
    rows: list[list[Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and key != "payload":
            rows += labelled(value, f"{name}.")
        elif key == "correlation" and isinstance(value, list):
            rows.append([name, ", ".join(f"{c['namespace']}/{c['value']}" for c in value)])
        elif isinstance(value, (dict, list)):
            rows.append([name, json.dumps(value, ensure_ascii=False, indent=2)])
        else:
            rows.append([name, value])
    return rows


def record(obj: Context, found: Any, what: str) -> None:
    if found is None:
        not_found(what)
    show(obj, found, table(what, ["field", "value"], labelled(plain(found))))


@show_group.command("event")
@click.argument("source")
@click.argument("event_id")
@click.pass_obj
@guarded
def show_event(obj: Context, source: str, event_id: str) -> None:
    """An event by (source, id): state, claim, payload."""
    record(obj, obj.store().events.lookup(source, event_id), f"event ({source!r}, {event_id!r})")


@show_group.command("wait")
@click.argument("run")
@click.argument("effect")
@click.pass_obj
@guarded
def show_wait(obj: Context, run: str, effect: str) -> None:
    """A wait by (run, effect): keys, parked mark, the event it holds."""
    record(obj, obj.store().events.lookup_wait(run, effect), f"wait ({run!r}, {effect!r})")


@show_group.command("timer")
@click.argument("run")
@click.argument("effect")
@click.pass_obj
@guarded
def show_timer(obj: Context, run: str, effect: str) -> None:
    """A timer by (run, effect): when it fires, and its claim."""
    record(obj, obj.store().timers.lookup(run, effect), f"timer ({run!r}, {effect!r})")


@show_group.command("run")
@click.argument("run")
@click.pass_obj
@guarded
def show_run(obj: Context, run: str) -> None:
    """A run's whole state: sealed or not, its waits and its timers."""
    found = obj.store().runs.lookup(run)
    if obj.as_json:
        show(obj, found, None)
        return
    console = Console()
    sealed = f"sealed at {plain(found.sealed_at)}" if found.sealed else "not sealed"
    console.print(f"run {run!r}: {sealed}, {len(found.waits)} waits, {len(found.timers)} timers")
    if found.waits:
        console.print(
            table(
                "waits",
                ["effect", "kind", "keys", "parked (UTC)", "holds"],
                [
                    [
                        w.subscription.effect,
                        w.subscription.kind,
                        keys_text(w.subscription.correlation),
                        when(w.parked_at),
                        "/".join(w.holds) if w.holds else "",
                    ]
                    for w in found.waits
                ],
            )
        )
    if found.timers:
        console.print(
            table(
                "timers",
                ["effect", "fires at (UTC)", "claimed (UTC)", "lease", "claims"],
                [
                    [
                        t.timer.effect,
                        when(t.timer.fire_at),
                        when(t.claimed_at),
                        f"{t.lease.total_seconds():g} s" if t.lease else "",
                        t.claims,
                    ]
                    for t in found.timers
                ],
            )
        )


@main.group("locate")
def locate_group() -> None:
    """The redis-cli commands that read one event, wait or timer."""


def print_commands(obj: Context, lines: list[str]) -> None:
    obj.emit({"commands": [line.split("   # ")[0] for line in lines]}, "\n".join(lines))


@locate_group.command("event")
@click.argument("source")
@click.argument("event_id")
@click.pass_obj
@guarded
def locate_event_command(obj: Context, source: str, event_id: str) -> None:
    """An event's row and payload, by (source, id); a live one's claim-search
    entries too."""
    store = obj.store()
    found = store.events.lookup(source, event_id)
    live, start = None, None
    if found is not None and found.state == "live":
        received = codec.instant("received_at", found.received_at)
        pairs = [(k.namespace, k.value) for k in found.event.correlation]
        live = (found.event.kind, received, pairs)
        # The live bucket: the greatest start at or before received_at.
        index = store.keys.key("live_index")
        starts = store.client.zrevrangebylex(index, b"[" + instant_member(received), b"-", 0, 1)
        start = codec.text(starts[0]) if starts else None
    lines = locate_event(store.keys, source, event_id, live, key_geometry(store), live_start=start)
    print_commands(obj, lines)


def key_geometry(store: RedisStore, family: str = "key") -> Geometry:
    """The key buckets' geometry (or another family's) as the server holds it."""
    stored = store.client.hget(store.keys.key("geometry"), family)
    return Geometry.parse(stored) if stored else Geometry()


@locate_group.command("wait")
@click.argument("run")
@click.argument("effect")
@click.pass_obj
@guarded
def locate_wait_command(obj: Context, run: str, effect: str) -> None:
    """A wait's attributes, key rows, mark and claim, by (run, effect); an
    unparked one's election entries too."""
    store = obj.store()
    found = store.events.lookup_wait(run, effect)
    electable = None
    if found is not None and found.parked_at is None and not store.runs.is_sealed(run):
        s = found.subscription
        pairs = [(k.namespace, k.value) for k in s.correlation]
        electable = (s.kind, s.from_source, pairs)
    print_commands(
        obj,
        locate_wait(
            store.keys,
            run,
            effect,
            electable,
            key_geometry(store),
            wait_geometry=key_geometry(store, "wait"),
        ),
    )


@locate_group.command("timer")
@click.argument("run")
@click.argument("effect")
@click.pass_obj
@guarded
def locate_timer_command(obj: Context, run: str, effect: str) -> None:
    """A timer's bucket row, fire time and claim, by (run, effect); the fire time
    needs its attributes, which an armed timer's lookup gives."""
    store = obj.store()
    found = store.timers.lookup(run, effect)
    attrs = None
    if found is not None:
        t = found.timer
        attrs = timer_attrs(t.step, t.phase.value, t.case)
    print_commands(obj, locate_timer(store.keys, run, effect, attrs, store.geometry))


@main.command("workers")
@click.pass_obj
@guarded
def workers_command(obj: Context) -> None:
    """The tenant's running workers (their heartbeats), oldest first."""
    entries = obj.store().workers.running()
    now = datetime.now(timezone.utc)
    rows = [
        [
            e.record.get("host"),
            e.record.get("pid"),
            ", ".join(e.record.get("tenants") or ()),
            e.record.get("concurrency"),
            short_time(e.record.get("started")),
            ago(now, e.record.get("last_pass")),
            ago(now, e.beat_at.isoformat()),
        ]
        for e in entries
    ]
    columns = ["host", "pid", "tenants", "conc.", "started (UTC)", "last pass", "beat"]
    data = [{"worker": e.worker, "beat_at": e.beat_at, **e.record} for e in entries]
    show(obj, data, table(f"{len(entries)} running workers", columns, rows))


def short_time(value: Any) -> str:
    """An ISO 8601 instant as ``MM-DD HH:MM:SS`` (UTC), for a table (``--json`` keeps
    it whole)."""
    if not value:
        return ""
    try:
        stamp = datetime.fromisoformat(str(value)).astimezone(timezone.utc)
    except ValueError:
        return str(value)
    return stamp.strftime("%m-%d %H:%M:%S")


def ago(now: datetime, value: Any) -> str:
    """How long before ``now`` an ISO 8601 instant was: "12 s ago", "3 min ago"."""
    if not value:
        return ""
    try:
        seconds = (now - datetime.fromisoformat(str(value))).total_seconds()
    except (ValueError, TypeError):
        return str(value)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


# ---------------------------------------------------------------- changing


def moved(obj: Context, run: str, effect: str, fire_at: datetime) -> None:
    """Reschedules the timer; exit 3 when it is not armed, 5 when it is under a lease."""
    store = obj.store()
    if store.timers.reschedule(run, effect, fire_at):
        obj.emit(
            {"run": run, "effect": effect, "fire_at": plain(fire_at), "rescheduled": True},
            f"timer ({run!r}, {effect!r}) now fires at {plain(fire_at)}",
        )
        return
    if store.timers.lookup(run, effect) is None:
        not_found(f"timer ({run!r}, {effect!r})")
    click.echo(
        f"agentplane-redis: timer ({run!r}, {effect!r}) is under a live lease (a worker is"
        " handling it): left as it is",
        err=True,
    )
    sys.exit(EXIT_SERVER)


@timers.command("reschedule")
@click.argument("run")
@click.argument("effect")
@click.option("--at", "at_", help="The new fire time, ISO 8601 (UTC unless it says).")
@click.option("--in", "in_", help="Or a delay from now, e.g. 90s, 15m, 2h.")
@click.pass_obj
@guarded
def timers_reschedule(
    obj: Context, run: str, effect: str, at_: str | None, in_: str | None
) -> None:
    """Set an armed timer's fire time (not one under a live lease)."""
    if (at_ is None) == (in_ is None):
        raise InvalidInput("give exactly one of --at and --in")
    if at_ is not None:
        try:
            fire_at = datetime.fromisoformat(at_.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"--at {at_!r} is not an ISO 8601 instant") from None
        if fire_at.tzinfo is None:
            fire_at = fire_at.replace(tzinfo=timezone.utc)
    else:
        fire_at = datetime.now(timezone.utc) + duration(in_ or "")
    moved(obj, run, effect, fire_at)


@timers.command("fire-now")
@click.argument("run")
@click.argument("effect")
@click.pass_obj
@guarded
def timers_fire_now(obj: Context, run: str, effect: str) -> None:
    """Make an armed timer due at once (a worker claims it on its next pass, woken)."""
    moved(obj, run, effect, datetime.now(timezone.utc))


@main.command()
@click.argument("source")
@click.argument("event_id")
@yes_option
@click.pass_obj
@guarded
def erase(obj: Context, source: str, event_id: str, yes: bool) -> None:
    """Erase one event's payload for good (its identity stays, for dedup)."""
    confirm(yes, f"Erase the payload of ({source!r}, {event_id!r}) in tenant {obj.tenant!r}?")
    if not obj.store().events.erase_payload(source, event_id):
        not_found(f"event ({source!r}, {event_id!r})")
    obj.emit({"erased": True}, "erased")


def left(store: RedisStore) -> int:
    """Rows purge could still remove."""
    now = store.events.stats()
    return now.dead + now.consumed


def with_progress(obj: Context, label: str, total: int, done: Callable[[], int], work: Any) -> Any:
    """Runs ``work()`` on a thread while a bar follows ``done()`` (read through the
    store) towards ``total``; returns what ``work`` returned, or raises what it raised."""
    result: dict[str, Any] = {}

    def run_work() -> None:
        try:
            result["value"] = work()
        except BaseException as failed:  # re-raised on the caller's thread
            result["error"] = failed

    thread = threading.Thread(target=run_work, daemon=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, transient=True, disable=obj.as_json) as bar:
        task = bar.add_task(label, total=max(total, 1))
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
            with contextlib.suppress(redis.exceptions.RedisError):
                bar.update(task, completed=min(done(), total))
    if "error" in result:
        raise result["error"]
    return result["value"]


@main.command()
@click.option("--older-than", "older_than", required=True, help="Grace window, e.g. 15m or 2h.")
@click.option("--reason", default="unclaimed", show_default=True)
@yes_option
@click.pass_obj
@guarded
def sweep(obj: Context, older_than: str, reason: str, yes: bool) -> None:
    """Dead-letter every live event received longer ago than --older-than."""
    cutoff = datetime.now(timezone.utc) - duration(older_than)
    confirm(yes, f"Dead-letter live events received before {plain(cutoff)}?")
    store = obj.store()
    before = store.events.stats()
    count = with_progress(
        obj,
        "sweeping",
        before.live,  # at most every live event
        lambda: store.events.stats().dead - before.dead,
        lambda: store.events.sweep_unclaimed(cutoff, reason),
    )
    obj.emit({"swept": count}, f"{count} events dead-lettered")


@main.command()
@click.option("--older-than", "older_than", required=True, help="Retention, e.g. 30d.")
@click.option("--limit", default=None, type=click.IntRange(min=0), help="At most this many rows.")
@yes_option
@click.pass_obj
@guarded
def purge(obj: Context, older_than: str, limit: int | None, yes: bool) -> None:
    """Remove dead and consumed rows older than --older-than (their dedup identity too)."""
    cutoff = datetime.now(timezone.utc) - duration(older_than)
    confirm(
        yes,
        f"Purge dead and consumed rows received before {plain(cutoff)}?"
        " Their ids become new again.",
    )
    store = obj.store()
    first = store.events.stats()
    removable = first.dead + first.consumed
    total = with_progress(
        obj,
        "purging",
        removable if limit is None else min(limit, removable),
        lambda: removable - left(store),
        lambda: store.events.purge(cutoff, limit=sys.maxsize if limit is None else limit),
    )
    obj.emit({"purged": total}, f"{total} rows purged")


@main.command()
@click.argument("run")
@yes_option
@click.pass_obj
@guarded
def seal(obj: Context, run: str, yes: bool) -> None:
    """Seal a run: its waits stop being matched; there is no unseal."""
    confirm(yes, f"Seal run {run!r} for good?")
    newly = obj.store().runs.seal(run)
    obj.emit({"newly_sealed": newly}, "sealed" if newly else "was already sealed")


@main.command("close")
@click.argument("run")
@click.option("--unanswered", multiple=True, help="An effect whose answer the journal lacks.")
@yes_option
@click.pass_obj
@guarded
def close_run(obj: Context, run: str, unanswered: tuple[str, ...], yes: bool) -> None:
    """Close a run: seal it, retire its waits and claims, disarm its timers."""
    confirm(yes, f"Close run {run!r} (seal, retire every wait, disarm every timer)?")
    closed = obj.store().runs.close(run, unanswered)
    text = (
        f"waits retired: {closed.retired.waits}, events released: {len(closed.retired.released)},"
        f" timers removed: {closed.timers}, newly sealed: {closed.newly_sealed}"
    )
    obj.emit(plain(closed), text)


# ---------------------------------------------------------------- running


def handler(spec: str) -> Any:
    """``module:function`` imported, or the refused-input exit."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise InvalidInput(f"{spec!r} is not module:function")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as missing:
        raise InvalidInput(f"cannot load {spec!r}: {missing}") from None


#: The fields of a worker's log record that a JSON line carries when the record has
#: them (``extra=`` of the worker's log calls).
LOG_FIELDS = ("tenant", "run", "effect", "attempt")


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the
    record's tenant, run, effect and attempt where it has them, and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: getattr(record, k) for k in LOG_FIELDS if hasattr(record, k)})
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextLines(logging.Formatter):
    """``2026-12-05T09:00:00.123Z ERROR agentplane_redis.worker: message``, then the
    traceback, if any, on the lines after."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = datetime.fromtimestamp(record.created, timezone.utc)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_to_stderr(style: str, level: str) -> None:
    """The package's log lines to stderr, as text or JSON lines, from ``level`` up."""
    out = logging.StreamHandler(sys.stderr)
    if style == "json":
        out.setFormatter(JsonLines())
    else:
        out.setFormatter(TextLines("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("agentplane_redis")
    logger.handlers[:] = [out]
    logger.setLevel(level.upper())
    logger.propagate = False


#: What a server that is not (yet) serving answers: worker and metrics wait it out.
NOT_YET = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
)


def stores_when_up(obj: Context, tenants: tuple[str, ...]) -> list[RedisStore]:
    """The tenants' stores, once the server answers: while it does not, says so on
    stderr and tries again with backoff (up to 30 s apart) until it does or the
    process is stopped."""
    import time  # noqa: PLC0415

    delay = 0.5
    while True:
        try:
            client = obj.client()  # anew: whether the URL names a cluster is asked too
            return [RedisStore(client, tenant=t) for t in tenants]
        except NOT_YET as error:
            click.echo(
                f"agentplane-redis: the server at {obj.url} does not answer ({error});"
                f" trying again in {delay:g} s (SIGTERM or Ctrl-C to stop)",
                err=True,
            )
            time.sleep(delay)
            delay = min(30.0, delay * 2)


#: A TCP port (0: any free one).
PORT = click.IntRange(0, 65_535)


def serving(start: Callable[[], Any], addr: str, port: int) -> Any:
    """Starts a metrics server, a bind that fails (port in use, no such address)
    refused in one line."""
    try:
        return start()
    except OSError as error:
        raise InvalidInput(
            f"cannot serve metrics on {addr}:{port}: {error.strerror or error}"
        ) from None


@main.command()
@click.option("--handler", "on_timer", required=True, help="Timer handler, module:function.")
@click.option("--redelivery", help="Redelivery handler, module:function.")
@click.option("--give-up", "give_up", help="Called when a timer fails --max-attempts times.")
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    help="Give a timer up (and disarm it) after this many failed claims [retry for ever].",
)
@click.option("--also", "tenants_", multiple=True, help="Serve this tenant too (repeatable).")
@click.option("--lease", default="60s", show_default=True)
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--sweep-grace", help="Dead-letter live events older than this, e.g. 1h.")
@click.option("--retention", help="Purge dead and consumed rows older than this, e.g. 30d.")
@click.option("--metrics-port", type=PORT, help="Also expose metrics on this port.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines as text, or one JSON object a line for log shippers.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.option(
    "--poll-interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="The longest sleep between passes, in seconds (an arm or park_wait wakes it sooner).",
)
@click.option(
    "--redelivery-interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between redelivery passes (a park_wait brings the next one forward).",
)
@click.option(
    "--no-wake",
    is_flag=True,
    help="Poll every --poll-interval instead of blocking on the server for wake-ups.",
)
@click.pass_obj
@guarded
def worker(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    on_timer: str,
    redelivery: str | None,
    give_up: str | None,
    max_attempts: int | None,
    tenants_: tuple[str, ...],
    lease: str,
    concurrency: int,
    sweep_grace: str | None,
    retention: str | None,
    metrics_port: int | None,
    poll_interval: float,
    redelivery_interval: float,
    no_wake: bool,
    log_format: str,
    log_level: str,
) -> None:
    """Run a worker until SIGTERM or SIGINT."""
    log_to_stderr(log_format, log_level)
    from .metrics import WorkerMetrics, serve  # noqa: PLC0415 - only this command needs them
    from .worker import Worker  # noqa: PLC0415

    stores = stores_when_up(obj, (obj.tenant, *tenants_))
    metrics = WorkerMetrics() if metrics_port is not None else None
    running = Worker(
        stores,
        on_timer=handler(on_timer),
        on_redelivery=handler(redelivery) if redelivery else None,
        on_give_up=handler(give_up) if give_up else None,
        max_attempts=max_attempts,
        lease=duration(lease),
        concurrency=concurrency,
        sweep_grace=duration(sweep_grace) if sweep_grace else None,
        retention=duration(retention) if retention else None,
        metrics=metrics,
        poll_interval=poll_interval,
        redelivery_interval=redelivery_interval,
        wake=not no_wake,
    )
    if metrics_port is not None:
        serving(
            lambda: serve(stores, metrics_port, worker_metrics=metrics), "127.0.0.1", metrics_port
        )
    click.echo(
        f"worker serving {', '.join(repr(s.tenant) for s in stores)}; SIGTERM to stop", err=True
    )
    running.run()


@main.command()
@click.option("--port", default=9464, show_default=True, type=PORT)
@click.option("--addr", default="127.0.0.1", show_default=True)
@click.option("--also", "tenants_", multiple=True, help="Export this tenant too (repeatable).")
@click.pass_obj
@guarded
def metrics(obj: Context, port: int, addr: str, tenants_: tuple[str, ...]) -> None:
    """Serve Prometheus metrics of the tenant(s) until SIGTERM or SIGINT."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from .metrics import serve  # noqa: PLC0415

    stores = stores_when_up(obj, (obj.tenant, *tenants_))
    server = serving(lambda: serve(stores, port, addr=addr), addr, port)
    click.echo(f"metrics on http://{addr}:{port}/metrics", err=True)
    # Handlers of our own: a process started in the background inherits SIGINT ignored.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    stop.wait()
    server.shutdown()


def tenants_on(client: Any) -> list[str]:
    """The tenants with keys on the server (found with SCAN, never KEYS)."""
    found = set()
    for key in client.scan_iter(match=f"{PREFIX}:{{*", count=1000):
        text = key.decode("utf-8", "replace")
        start, end = text.find("{"), text.find("}:")
        if start >= 0 and end > start:
            found.add(text[start + 1 : end])
    return sorted(found)


LOOPBACK = ("127.0.0.1", "::1", "localhost")


@main.command()
@click.option("--port", default=8080, show_default=True, type=PORT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--also", "tenants_", multiple=True, help="Show this tenant too (repeatable).")
@click.option("--all-tenants", is_flag=True, help="Every tenant found on the server (SCAN).")
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Show the buttons that change state (revive, fire now, sweep, seal, ...).",
)
@click.option(
    "--auth",
    envvar="AGENTPLANE_DASHBOARD_AUTH",
    help="user:password every request must give (or AGENTPLANE_DASHBOARD_AUTH);"
    " needed off loopback.",
)
@click.pass_obj
@guarded
def dashboard(  # noqa: PLR0917 - click passes every option as an argument
    obj: Context,
    port: int,
    host: str,
    tenants_: tuple[str, ...],
    all_tenants: bool,
    allow_actions: bool,
    auth: str | None,
) -> None:
    """Serve the web dashboard until SIGTERM or SIGINT (read-only unless
    --allow-actions)."""
    try:
        import uvicorn  # noqa: PLC0415

        from .dashboard import create_app  # noqa: PLC0415
    except ImportError as missing:
        raise InvalidInput(
            f"the dashboard needs its extra: pip install 'agentplane-redis[dashboard]' ({missing})"
        ) from None
    credentials = None
    if auth is not None:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise InvalidInput("--auth is user:password")
        credentials = (user, password)
    if host not in LOOPBACK:
        if credentials is None:
            raise InvalidInput(f"--host {host} serves other machines: give --auth user:password")
        click.echo(
            f"agentplane-redis: warning: the dashboard listens on {host}, beyond this machine",
            err=True,
        )
    names = [obj.tenant, *tenants_]
    note = None
    if all_tenants:
        try:
            names = tenants_on(obj.client()) or names
        except redis.exceptions.NoPermissionError:
            note = f"Only tenant {obj.tenant!r}: this user may not list the server's keys."
    stores = stores_when_up(obj, tuple(dict.fromkeys(names)))
    app = create_app(stores, auth=credentials, note=note, allow_actions=allow_actions)
    click.echo(f"dashboard on http://{host}:{port}/ (Ctrl-C to stop)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


@main.command()
@click.option("--workers", default=3, show_default=True, type=click.IntRange(min=2))
@click.option("--timers", default=300, show_default=True, type=click.IntRange(min=1))
@click.pass_obj
@guarded
def demo(obj: Context, workers: int, timers: int) -> None:
    """The stores at work on a real server, checked as they go (exit 1 if a check fails):
    the server --url or AGENTPLANE_REDIS_URL names, else an embedded one."""
    from .demo import run as run_demo  # noqa: PLC0415 - only this command needs it

    if not run_demo(obj.url if obj.url_given else None, workers=workers, timers=timers):
        sys.exit(1)
