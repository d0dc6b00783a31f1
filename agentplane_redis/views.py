"""What the CLI and the dashboard show alike: the listings' filters, a filtered list
read a page of the store at a time, whether a tenant has keys at all, and durations
as operators write them (``15m``, ``30d``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import redis

from .errors import InvalidInput
from .keys import BUCKETED, ROLES

T = TypeVar("T")

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
#: The longest duration an option takes (a century), so that now minus it is a date.
MAX_DURATION = timedelta(days=36_500)
_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``30d``: a duration, or ``InvalidInput``."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise InvalidInput(f"{text!r} is not a duration like 90s, 15m, 2h or 30d")
    try:
        value = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        value = MAX_DURATION + MAX_DURATION
    if value > MAX_DURATION:
        raise InvalidInput(f"{text!r} is longer than {MAX_DURATION.days} days")
    return value


def has_keys(store: Any) -> bool:
    """Whether any of the tenant's fixed keys exists (True where the server will not
    say: a tenant's ACL user may not run EXISTS)."""
    fixed = [store.keys.key(role) for role in ROLES if role not in BUCKETED]
    try:
        return int(store.client.exists(*fixed)) > 0
    except (redis.exceptions.RedisError, AttributeError):
        return True


def _keyed(correlation: Sequence[Any], key: str | None) -> bool:
    """Whether the correlation keys hold ``key`` (``namespace/value``; None: any)."""
    if key is None:
        return True
    ns, _, value = key.partition("/")
    return any((k.namespace, k.value) == (ns, value) for k in correlation)


def event_filter(
    key: str | None = None, kind: str | None = None, source: str | None = None
) -> Callable[[Any], bool]:
    """Whether a dead letter or a buffered event matches each filter given."""

    def ok(item: Any) -> bool:
        e = item.event
        return (
            (kind is None or e.kind == kind)
            and (source is None or e.source == source)
            and _keyed(e.correlation, key)
        )

    return ok


def wait_filter(
    key: str | None = None,
    kind: str | None = None,
    source: str | None = None,
    run: str | None = None,
) -> Callable[[Any], bool]:
    """Whether a wait (a ``Subscription``) matches each filter given; ``source`` is its
    ``from_source``."""

    def ok(sub: Any) -> bool:
        return (
            (kind is None or sub.kind == kind)
            and (source is None or sub.from_source == source)
            and (run is None or sub.run == run)
            and _keyed(sub.correlation, key)
        )

    return ok


def filtered(
    fetch: Callable[[int, str | None], tuple[list[T], str | None]],
    ok: Callable[[T], bool],
    limit: int,
    after: str | None,
) -> tuple[list[T], str | None]:
    """Up to ``limit`` items that pass ``ok``, read a page of the store at a time after
    the cursor ``after``; and the cursor where the listing stopped, None when the list
    ended. Each page is no longer than the room left, so a full list's last item is
    the last one read, and the cursor is exactly after it, whatever ``ok`` kept."""
    found: list[T] = []
    cursor = after
    while len(found) < limit:
        page, cursor = fetch(limit - len(found), cursor)
        found += [item for item in page if ok(item)]
        if cursor is None:
            break
    return found, cursor if len(found) == limit else None
