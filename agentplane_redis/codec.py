"""Validation of input and decoding of stored rows (pure).

Everything here runs before a command is sent, or after a reply arrives; none
of it does I/O. Rules are contract section 9.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple, NoReturn

from .errors import CorruptRow, InvalidInput
from .keys import (
    COMPONENT_BODY,
    INSTANT_OFFSET,
    ROW_STATES,
    split_components,
    unpack_event_row,
)
from .model import (
    JSON,
    CorrelationKey,
    InboundEvent,
    Operator,
    Phase,
    Subscription,
    Timer,
)

_UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_MS = timedelta(milliseconds=1)
MAX_STEP = 2**32 - 1
MAX_PAYLOAD_LIMIT = 512 * 1024 * 1024
MIN_INSTANT = (datetime.min.replace(tzinfo=timezone.utc) - EPOCH) // _MS
MAX_INSTANT = (datetime.max.replace(tzinfo=timezone.utc) - EPOCH) // _MS
#: The longest lease a timer claim may take (contract 9.1: a documented maximum).
MAX_LEASE = timedelta(days=365)
MAX_LEASE_MS = MAX_LEASE // _MS
#: A listing's limit as sent to a script: larger limits mean "all" and are sent as
#: this, which Lua numbers and Redis ranges hold exactly.
MAX_LISTING = 10**12
#: The longest identifier accepted (run, effect, source, id, kind, namespace, value,
#: case, from_source, operator parts), in bytes of UTF-8: one call's work is
#: bounded by its input (contract 7.2).
MAX_ID_BYTES = 4096
#: Correlation keys per event or wait: the default of the store option
#: ``max_correlation_keys``, and the most it may be set to (the scripts refuse more).
DEFAULT_MAX_KEYS = 64
MAX_KEYS_LIMIT = 1024
#: The bytes an event's or a wait's correlation keys come to, each key counted with
#: the identifiers its index entries repeat (an event's kind, source and id; a wait's
#: kind, run, effect and sender): at most this many. Each key is an entry in the
#: indexes searches read, so this bounds the work of one call whatever the mix of
#: key count and identifier length (contract 7.2: 10 ms at the largest input).
MAX_KEY_BYTES = 64 * 1024
#: Nesting beyond which a payload is decoded once more before it is accepted, so
#: that whatever is stored can be read back (json's decoder recurses).
_DEEP = 200
DEFAULT_DEAD_REASON = "unclaimed"


# ---------------------------------------------------------------- input


def ident(name: str, value: object) -> str:
    """A non-empty identifier encodable as UTF-8, of at most ``MAX_ID_BYTES`` bytes
    (any content otherwise)."""
    if type(value) is str and value and value.isascii() and len(value) <= MAX_ID_BYTES:
        return value  # the usual case
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidInput(f"{name} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not encodable as UTF-8 (lone surrogate?)") from None
    if size > MAX_ID_BYTES:
        raise InvalidInput(f"{name} is {size} bytes of UTF-8; at most {MAX_ID_BYTES} are accepted")
    return value


def optional_ident(name: str, value: object) -> str:
    """An optional identifier as the row stores it: "" for None."""
    return "" if value is None else ident(name, value)


def instant(name: str, value: object) -> int:
    """Milliseconds since the epoch of an aware datetime, sub-millisecond digits dropped,
    within what a UTC datetime holds (an aware ``datetime.max`` west of UTC is not)."""
    if type(value) is datetime and value.tzinfo is _UTC:  # the usual case: UTC already
        ms = (value - EPOCH) // _MS  # one tzinfo: subtracted as it stands, never overflows
    else:
        ms = _instant_elsewhere(name, value)
    if not MIN_INSTANT <= ms <= MAX_INSTANT:
        raise InvalidInput(
            f"{name} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999Z once in UTC"
        )
    return ms


def _instant_elsewhere(name: str, value: object) -> int:
    """``instant`` of anything but a UTC datetime: its offset taken off, refused where
    it has none."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a datetime, not {type(value).__name__}")
    try:
        offset = value.utcoffset()
    except (ValueError, OverflowError, TypeError) as bad:
        raise InvalidInput(f"{name} has a time zone that gives no offset: {bad}") from None
    if offset is None:
        raise InvalidInput(f"{name} must be timezone-aware")
    return (value.replace(tzinfo=None) - EPOCH.replace(tzinfo=None) - offset) // _MS


def to_datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def optional_instant(name: str, value: object) -> int | None:
    return None if value is None else instant(name, value)


def limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an int")
    if value < 0:
        raise InvalidInput(f"{name} must be at least 0")
    return int(value)


def listing(name: str, value: object) -> int:
    """A listing's limit as a script takes it: any larger limit means "all"."""
    return min(limit(name, value), MAX_LISTING)


#: A listing's cursor over an index of instants: the last row's 16-digit instant and
#: its two components (an event's source and id, a wait's run and effect), then,
#: for ``waiting``, the instant of a key the wait gained later, if it was that
#: member, and a line end and the key the page stopped inside, if it did.
_COMPONENT = COMPONENT_BODY + b" "
_INDEX_CURSOR = re.compile(rb"[0-9]{16}(?:%s){2}" % _COMPONENT)
_WAITING_CURSOR = re.compile(
    rb"[0-9]{16}(?:%s){2}(?:[0-9]{16})?(?:\n(?:%s){2})?" % (_COMPONENT, _COMPONENT)
)


#: ``pending_page``'s cursor: the last timer's fire_at (ms), ":", and its walk member
#: (run and effect as components, then step, phase letter and case).
_TIMER_CURSOR = re.compile(rb"(-?[0-9]{1,16}):((?:%s){2}[0-9]{1,10}[fc].*)" % _COMPONENT, re.S)


def _shaped(name: str, value: object, shape: re.Pattern[bytes]) -> re.Match[bytes] | None:
    """A page's cursor matched against the shape its listing gives; None for the start."""
    found = cursor(name, value)
    if not found:
        return None
    match = shape.fullmatch(found.encode("utf-8"))
    if match is None:
        raise InvalidInput(f"{name}: {found!r} is not a cursor a page of this listing gave")
    return match


def timer_cursor(name: str, value: object) -> tuple[str, bytes]:
    """A cursor ``pending_page`` gave, as (fire_at ms, member); ("", b"") for None."""
    match = _shaped(name, value, _TIMER_CURSOR)
    return ("", b"") if match is None else (match.group(1).decode("ascii"), match.group(2))


def index_cursor(name: str, value: object, *, waiting: bool = False) -> str:
    """A cursor ``live_page``, ``dead_letters_page`` (or, ``waiting``, ``waiting_page``)
    gave: refused unless it has that shape, "" (the start) for None."""
    match = _shaped(name, value, _WAITING_CURSOR if waiting else _INDEX_CURSOR)
    return "" if match is None else match.string.decode("utf-8")


def flag(name: str, value: object) -> bool:
    """A yes-or-no option: True or False, nothing that merely tests true."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be True or False")
    return value


def cursor(name: str, value: object) -> str:
    """A page's cursor: the str a previous page gave, or "" (the start) for None."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a cursor a previous page gave, or None")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not a cursor a page gave (lone surrogate?)") from None
    return value


def duration_ms(name: str, value: object) -> int:
    """A lease as whole milliseconds: at least 1 after truncation, at most ``MAX_LEASE``."""
    if isinstance(value, timedelta):
        ms = value // _MS
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidInput(f"{name} must be finite")
        ms = math.floor(value * 1000)
    else:
        raise InvalidInput(f"{name} must be a timedelta or a number of seconds")
    if ms < 1:
        raise InvalidInput(f"{name} must be at least 1 ms")
    if ms > MAX_LEASE_MS:
        raise InvalidInput(f"{name} must be at most {MAX_LEASE.days} days")
    return int(ms)


def reason(value: object) -> str:
    """A dead-letter reason: any str encodable as UTF-8, empty included."""
    if not isinstance(value, str):
        raise InvalidInput("reason must be a str")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("reason is not encodable as UTF-8 (lone surrogate?)") from None
    return value


def step(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise InvalidInput(f"step must be an int from 0 to {MAX_STEP}")
    return value


def phase(value: object) -> Phase:
    if isinstance(value, Phase):
        return value
    if isinstance(value, str) and value in ("forward", "compensating"):
        return Phase(value)
    raise InvalidInput('phase must be a Phase, "forward" or "compensating"')


def correlation(
    keys: object, *, required: bool, limit: int = DEFAULT_MAX_KEYS
) -> list[tuple[str, str]]:
    """The distinct keys, first-given order kept; at most ``limit`` of them."""
    if not isinstance(keys, (tuple, list)):
        raise InvalidInput("correlation must be a tuple of CorrelationKey")
    seen: dict[tuple[str, str], None] = {}  # insertion-ordered: first-given order kept
    for key in keys:
        if not isinstance(key, CorrelationKey):
            raise InvalidInput(f"correlation keys must be CorrelationKey, not {key!r}")
        seen.setdefault((ident("namespace", key.namespace), ident("value", key.value)))
        if len(seen) > limit:
            raise InvalidInput(
                f"more than {limit} correlation keys; at most {limit} are accepted"
                " (max_correlation_keys)"
            )
    if required and not seen:
        raise InvalidInput("a subscription needs at least one correlation key")
    return list(seen)


def _check_json(value: object) -> int:
    """Refuses what is not a JSON value; the nesting depth. Iterative, so that no
    depth of nesting can exhaust the interpreter's stack."""
    depth = 0
    open_ids: set[int] = set()
    # (container, iterator over its children) for each open container
    stack: list[tuple[object, Iterator[object]]] = []
    pending: object = value
    while True:
        if pending is None or isinstance(pending, (bool, int, str)):
            pass
        elif isinstance(pending, float):
            if not math.isfinite(pending):
                raise InvalidInput("payload floats must be finite")
        elif isinstance(pending, (list, tuple, dict)):
            if id(pending) in open_ids:
                raise InvalidInput("payload contains a cycle")
            if isinstance(pending, dict):
                for k in pending:
                    if not isinstance(k, str):
                        raise InvalidInput(f"payload dict keys must be str, not {k!r}")
                children: Iterator[object] = iter(pending.values())
            else:
                children = iter(pending)
            open_ids.add(id(pending))
            stack.append((pending, children))
            depth = max(depth, len(stack))
        else:
            raise InvalidInput(
                f"payload holds a {type(pending).__name__}, which is not a JSON value"
            )
        while stack:
            container, children = stack[-1]
            nxt = next(children, _END)
            if nxt is not _END:
                pending = nxt
                break
            stack.pop()
            open_ids.discard(id(container))
        else:
            return depth


_END = object()


#: Compact JSON text, non-ASCII kept, non-finite floats refused (json.dumps's own).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
#: What a flat payload's values may be without a walk (floats are walked: finiteness).
_FLAT = frozenset({str, int, bool, type(None)})


def _flat(value: object) -> bool:
    """Whether the payload is a dict of str keys and scalar values: JSON, depth 1."""
    return (
        type(value) is dict
        and all(type(k) is str for k in value)
        and all(type(v) in _FLAT for v in value.values())
    )


def payload_text(value: JSON, max_bytes: int) -> str:
    """Compact UTF-8 JSON text of a payload, within the size limit, that json reads back."""
    depth = 1 if _flat(value) else _check_json(value)
    try:
        text = _JSON.encode(value)
    except (ValueError, RecursionError) as bad:  # an int over the digit limit; deep nesting
        raise InvalidInput(f"payload cannot be encoded as JSON: {bad}") from None
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput("payload holds a string with a lone surrogate") from None
    if size > max_bytes:
        raise InvalidInput(f"payload is {size} bytes, over the limit of {max_bytes}")
    if depth > _DEEP:
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            raise InvalidInput("payload is nested too deeply to be read back") from None
    return text


def event_args(event: object, max_payload: int, max_keys: int = DEFAULT_MAX_KEYS) -> list[str]:
    """The full validation of an event, as script arguments:
    source, id, kind, payload, actor, basis, then (namespace, value) pairs."""
    if not isinstance(event, InboundEvent):
        raise InvalidInput(f"expected an InboundEvent, not {type(event).__name__}")
    args = [ident("source", event.source), ident("id", event.id), ident("kind", event.kind)]
    args.append(payload_text(event.payload, max_payload))
    if event.by is None:
        args += ["", ""]
    elif isinstance(event.by, Operator):
        args += [ident("operator actor", event.by.actor), ident("operator basis", event.by.basis)]
    else:
        raise InvalidInput("by must be an Operator or None")
    pairs = correlation(event.correlation, required=False, limit=max_keys)
    _key_bytes("event", pairs, args[:3])
    for ns, value in pairs:
        args += [ns, value]
    return args


def _size(value: str) -> int:
    return len(value) if value.isascii() else len(value.encode("utf-8"))


def _key_bytes(what: str, pairs: list[tuple[str, str]], repeated: list[str]) -> None:
    """Refuses keys whose index entries would come to more than MAX_KEY_BYTES."""
    if not pairs:
        return
    each = sum(_size(v) for v in repeated)
    total = sum(each + _size(ns) + _size(value) for ns, value in pairs)
    if total > MAX_KEY_BYTES:
        raise InvalidInput(
            f"the {what}'s {len(pairs)} correlation keys come to {total} bytes, each counted"
            f" with the identifiers its index entry repeats; at most {MAX_KEY_BYTES} are"
            " accepted (fewer keys, or shorter identifiers)"
        )


def subscription_args(sub: object, max_keys: int = DEFAULT_MAX_KEYS) -> list[str]:
    """run, effect, kind, step, phase, case, from_source, then (namespace, value) pairs."""
    if not isinstance(sub, Subscription):
        raise InvalidInput(f"expected a Subscription, not {type(sub).__name__}")
    args = [
        ident("run", sub.run),
        ident("effect", sub.effect),
        ident("kind", sub.kind),
        str(step(sub.step)),
        phase(sub.phase).value,
        optional_ident("case", sub.case),
        optional_ident("from_source", sub.from_source),
    ]
    pairs = correlation(sub.correlation, required=True, limit=max_keys)
    _key_bytes("wait", pairs, [args[0], args[1], args[2], args[6]])
    for ns, value in pairs:
        args += [ns, value]
    return args


def timer_args(timer: object) -> list[str]:
    """run, effect, fire_at, step, phase, case."""
    if not isinstance(timer, Timer):
        raise InvalidInput(f"expected a Timer, not {type(timer).__name__}")
    return [
        ident("run", timer.run),
        ident("effect", timer.effect),
        str(instant("fire_at", timer.fire_at)),
        str(step(timer.step)),
        phase(timer.phase).value,
        optional_ident("case", timer.case),
    ]


def effects(values: object) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidInput("unanswered must be a collection of effect strings")
    return list(dict.fromkeys(ident("unanswered effect", v) for v in values))


# ---------------------------------------------------------------- replies


def text(value: object) -> str:
    """A reply string, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"unexpected reply element {value!r}")


def raw(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"unexpected reply element {value!r}")


def integer(value: object) -> int:
    if isinstance(value, int):
        return value
    return int(text(value))


def reply_list(reply: Any) -> Any:
    """A script's reply as the list it stands for: a line of words split into
    them, a writing call's reply sent as the text it remembered (``*<n>:...``) read by
    ``replayed``, an array as it is (``lua/README.md``, "Replies")."""
    if isinstance(reply, (bytes, str)):
        return replayed(reply) if reply[:1] in _TEXT else reply.split()
    return reply


#: How a reply sent as its remembered text starts (bytes, or str where decoded).
_TEXT = (b"*", "*")


def replayed(data: object) -> Any:
    """A writing call's reply as the text it remembered (``lua/_lib/core.lua``), which
    is also how the call answers: ``*<n>:`` then n elements, ``$<len>:<bytes>`` or
    ``:<integer>;``, or a list again."""
    blob = raw(data)
    try:
        value, end = _element(blob, 0)
    except IndexError:  # cut short
        raise ValueError("a remembered reply cut short") from None
    if end != len(blob):
        raise ValueError("trailing bytes after a remembered reply")
    return value


_STRING, _INTEGER, _LIST = ord("$"), ord(":"), ord("*")


def _element(blob: bytes, pos: int) -> tuple[Any, int]:
    """The element of a remembered reply at ``pos``, and the position after it (a
    list's strings, the usual elements, read in its own loop)."""
    tag, colon = blob[pos], blob.index(b":", pos)
    if tag == _STRING:
        end = colon + 1 + int(blob[pos + 1 : colon])
        return blob[colon + 1 : end], end
    if tag == _INTEGER:
        end = blob.index(b";", colon)
        return int(blob[colon + 1 : end]), end + 1
    if tag != _LIST:
        raise ValueError(f"not a remembered reply at byte {pos}")
    out: list[Any] = []
    add, find = out.append, blob.index
    at = colon + 1
    for _ in range(int(blob[pos + 1 : colon])):
        if blob[at] == _STRING:
            colon = find(b":", at)
            end = colon + 1 + int(blob[at + 1 : colon])
            add(blob[colon + 1 : end])
            at = end
        else:
            item, at = _element(blob, at)
            add(item)
    return out, at


def fail_corrupt(what: str, detail: str) -> NoReturn:
    raise CorruptRow(what, detail)


def check_status(reply: Sequence[Any]) -> str:
    """The leading status of a reply; a CORRUPT reply raises CorruptRow."""
    status = text(reply[0])
    if status == "CORRUPT":
        fail_corrupt(f"{text(reply[1])} {text(reply[2])}", text(reply[3]))
    if status == "REFUSED":  # the scripts' own bounds, which validation keeps below
        raise InvalidInput(f"refused by the server: {text(reply[1])}")
    return status


#: An instant's decimal as a row stores it (at most 16 characters, checked apart).
_DECIMAL = re.compile(r"-?[0-9]+")


def _shown(field: bytes | str) -> str:
    """A field as a refusal quotes it: its bytes, each past ASCII shown as U+FFFD."""
    return (field.encode() if isinstance(field, str) else field).decode("ascii", "replace")


def _stored_instant(what: str, field: bytes | str) -> int:
    s = field if isinstance(field, str) else field.decode("ascii", "replace")
    if len(s) > 16 or _DECIMAL.fullmatch(s) is None:
        fail_corrupt(what, f"instant {_shown(field)!r} is not a decimal integer")
    value = int(s)
    if not MIN_INSTANT <= value <= MAX_INSTANT:
        fail_corrupt(what, f"instant {value} out of range")
    return value


def stored_instant(what: str, field: bytes | str) -> datetime:
    return to_datetime(_stored_instant(what, field))


def stored_step(what: str, field: bytes | str) -> int:
    s = field if isinstance(field, str) else field.decode("ascii", "replace")
    if not s.isdigit() or not s.isascii() or len(s) > 10 or int(s) > MAX_STEP:
        fail_corrupt(what, f"step {_shown(field)!r} is not in range")
    return int(s)


class StoredRow(NamedTuple):
    """What an event row holds beside its event and received_at."""

    state: str
    #: (run, effect) of the wait holding or having consumed the row, or None.
    holder: tuple[str, str] | None
    #: claimed_at in ms since the epoch, for a row with a holder.
    claimed_ms: int | None
    #: The dead reason as stored ("" for none).
    reason: str
    erased: bool
    targeted: bool


def _row_ms(what: str, digits: bytes) -> int:
    """An instant a row holds as 16 digits (``keys.instant_member``), in ms."""
    ms = int(digits) - INSTANT_OFFSET
    if not MIN_INSTANT <= ms <= MAX_INSTANT:
        fail_corrupt(what, f"instant {ms} out of range")
    return ms


def _event_id(data: bytes) -> tuple[str, str, int]:
    """The source and id an event row in a reply starts with, and where they end."""
    first = data.find(b" ")
    second = data.find(b" ", first + 1)
    try:
        if first > 0 and second > first + 1:
            if data.find(b"!", 0, second) < 0:
                source, id_ = data[:first].decode("utf-8"), data[first + 1 : second].decode("utf-8")
                return source, id_, second
            source, id_ = split_components(data[: second + 1])
            return source, id_, second
    except (ValueError, UnicodeDecodeError):
        pass
    fail_corrupt("event row", "not an event's id and row")


def event_row(
    row: object,
    has_payload: object = b"0",
    payload: object = b"",
    *,
    stored: bool = False,
    eid: object = None,
) -> tuple[InboundEvent, datetime, StoredRow]:
    """The event of a row as the scripts reply with it: its eid, then the row up to
    its "\\n" (the payload beside it), or with ``stored`` the whole row as stored
    (its payload last); with its received_at and the rest the row holds. Where
    the reply sends the eid apart (``eid``), ``row`` is the row alone."""
    data = raw(row)
    if eid is None:
        source, id_, second = _event_id(data)
        body = data[second + 1 :]
    else:
        ident_ = raw(eid)
        source, id_, second = _event_id(ident_)
        if second != len(ident_) - 1:
            fail_corrupt("event row", "not an event's id and row")
        body = data
    what = f"event ({source!r}, {id_!r})"
    f = unpack_event_row(body)
    if f is None:
        fail_corrupt(what, "not an event row")
    if stored:
        payload = f[-1]
        has_payload = b"1" if payload else b"0"
    state = ROW_STATES[f[0]]
    try:
        run, effect, _, kind, actor, basis, reason, *pairs = map(bytes.decode, f[4:-1])
    except UnicodeDecodeError:
        fail_corrupt(what, "a field is not UTF-8")
    received = to_datetime(_row_ms(what, f[3]))
    if not kind:
        fail_corrupt(what, "empty kind")
    if bool(actor) != bool(basis):
        fail_corrupt(what, "half an operator")
    held = state in {"held", "consumed"}
    if held and not (run and effect):
        fail_corrupt(what, f"{state} row without a holder")
    claimed = _row_ms(what, f[6]) if held else None
    keys: tuple[CorrelationKey, ...]
    if len(pairs) == 2:  # the usual one key
        keys = (CorrelationKey(pairs[0], pairs[1]),)
    else:
        keys = tuple(
            sorted(
                {CorrelationKey(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)},
                key=lambda k: (k.namespace.encode(), k.value.encode()),
            )
        )
    value: JSON = None
    if has_payload in {b"1", "1"}:
        try:
            value = json.loads(raw(payload))
        except (ValueError, UnicodeDecodeError):
            fail_corrupt(what, "payload is not JSON")
    by = Operator(actor, basis) if actor else None
    event = InboundEvent(source, id_, kind, value, keys, by)
    holder = (run, effect) if held else None
    rest = StoredRow(state, holder, claimed, reason, f[1] == b"e", f[2] == b"t")
    return event, received, rest


#: A wait's attributes as its key rows hold them and replies carry them: the kind's
#: component, the step's decimal and "f" or "c" and a space, then the case's and the
#: from_source's components (each "" for none).
_COMPONENT = rb"(?:[^\x00-\x21]|![\x40-\x61])*"
_WAIT_ATTRS = re.compile(rb"(%s) (\d+)([fc]) (%s %s )" % (_COMPONENT, _COMPONENT, _COMPONENT))


def wait_attrs(what: str, row: object) -> tuple[str, int, Phase, str | None, str | None]:
    """(kind, step, phase, case, from_source) of a wait's attributes text."""
    found = _WAIT_ATTRS.fullmatch(raw(row))
    if found is None:
        fail_corrupt(what, "not a wait's attributes")
    try:
        kind, case, from_source = split_components(found.group(1) + b" " + found.group(4))
    except (ValueError, UnicodeDecodeError):
        fail_corrupt(what, "an attribute is not UTF-8")
    if not kind:
        fail_corrupt(what, "empty kind")
    phase = Phase.COMPENSATING if found.group(3) == b"c" else Phase.FORWARD
    return kind, stored_step(what, found.group(2)), phase, case or None, from_source or None


def subscription(run: object, effect: object, attrs: object, keys: Sequence[Any]) -> Subscription:
    r, e = text(run), text(effect)
    kind, st, ph, case, from_source = wait_attrs(f"wait ({r!r}, {e!r})", attrs)
    pairs = [text(k) for k in keys]
    correlation = tuple(CorrelationKey(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))
    return Subscription(r, e, kind, correlation, st, ph, case, from_source)


def subscription_reply(reply: Sequence[Any]) -> Subscription:
    return subscription(reply[0], reply[1], reply[2], reply[3])


def timer_id(member: object) -> tuple[str, str]:
    """(run, effect) of a timer's id as the scripts store it: two components."""
    try:
        parts = split_components(raw(member))
    except (ValueError, UnicodeDecodeError):
        parts = []
    if len(parts) != 2:
        fail_corrupt(f"timer id {raw(member)!r}", "not a (run, effect) pair")
    return parts[0], parts[1]


_ATTRS = re.compile(rb"(\d{1,10})([fc])(.*)", re.DOTALL)


def timer_member(member: object, fire_at: object, attempt: int = 0) -> Timer:
    """A timer from its member (its (run, effect) as two components, then step,
    "f" or "c", case) and its fire_at, decimal ms as the scripts answer it; attempt:
    its claim's number, on a timer claim_due claimed."""
    data = raw(member)
    first = data.find(b" ")
    second = data.find(b" ", first + 1) if first >= 0 else -1
    what = f"timer {data[: max(second, 0) + 1]!r}"
    try:
        run, effect = split_components(data[: second + 1]) if second >= 0 else ("", "")
        attrs = _ATTRS.fullmatch(data, second + 1) if second >= 0 else None
        case = attrs.group(3).decode("utf-8") if attrs else ""
    except (ValueError, UnicodeDecodeError):
        attrs = None
    if attrs is None:
        fail_corrupt(what, "not a (run, effect, step, phase, case) member")
    what = f"timer ({run!r}, {effect!r})"
    step = int(attrs.group(1))
    if step > MAX_STEP:
        fail_corrupt(what, f"step {step} is not in range")
    phase = Phase.FORWARD if attrs.group(2) == b"f" else Phase.COMPENSATING
    fire = stored_instant(what, text(fire_at))
    return Timer(run, effect, fire, step, phase, case or None, attempt)


def timer_claim(timer: Timer, claim: object) -> tuple[int | None, int | None, int]:
    """A timer's last claim, stored as "claimed_at lease claims": claimed_at and the
    lease in ms and how many claims it has had, or (None, None, 0) when it was never
    claimed."""
    what = f"timer ({timer.run!r}, {timer.effect!r})"
    stored = text(claim)
    if not stored:
        return None, None, 0
    parts = stored.split(" ")
    if len(parts) != 3:
        fail_corrupt(what, f"claim {stored!r} is not claimed_at, lease and count")
    claimed = _stored_instant(what, parts[0])
    for name, value in (("lease", parts[1]), ("claim count", parts[2])):
        if not value.isdigit() or not value.isascii() or int(value) < 1:
            fail_corrupt(what, f"{name} {value!r} is not a positive integer")
    return claimed, int(parts[1]), int(parts[2])


def listed_rows(reply: Sequence[Any]) -> list[tuple[InboundEvent, datetime, StoredRow]]:
    """The rows of a listing step's reply (``lua/_lib/events.lua``, listed_rows):
    after its status and last member, each row's eid and then the row as stored."""
    return [event_row(reply[i + 1], stored=True, eid=reply[i]) for i in range(2, len(reply), 2)]


def row_minter(eid: object, row: object) -> Operator | None:
    """Who minted the event of a stored row, beside its eid, that its script has
    checked already (``lua/minter.lua`` refuses a corrupt row as CorruptRow): what
    is left to check here is what Lua does not, that every field is UTF-8."""
    event, _, _ = event_row(row, stored=True, eid=eid)
    return event.by


def dead_reason(stored: str) -> str:
    return stored or DEFAULT_DEAD_REASON
