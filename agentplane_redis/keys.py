"""A tenant's key set and the encodings of fields and members (pure; see docs/keys.md).

Every key of a tenant is ``agentplane:{<tenant>}:<role name>``: one hash tag
per tenant, so every script's keys share a cluster slot, and a fixed, small set
of keys whatever the data. Scripts name the keys they touch by *role* in their
headers; ``TenantKeys.for_roles`` turns those roles into key names, so a header
cannot drift from the keys Python passes.

Encodings (mirrored by ``lua/_lib/codec.lua``):

* a **component** is a string's UTF-8 bytes, each byte 0x00..0x21 (controls,
  space and ``!``) written ``!`` and the byte plus 0x40, then the terminator, a
  space. A tuple is its components concatenated: ``stripe evt_1 ``. This is
  injective and order-preserving (tuples compare field by field, by bytes, a
  proper prefix first), and reads as text.
* an **instant** in a member is ``ms + 10**15`` as 16 zero-padded decimal
  digits, so byte order is time order for every instant a ``datetime`` holds
  (negative ones included).
* an **event row** (a hash value) is its state, marks and received_at in its
  first 21 bytes, its other fields as components, then a line end and the
  payload (``pack_event_row``, ``unpack_event_row``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .errors import InvalidInput

PREFIX = "agentplane"

#: role -> key suffix. The roles are the names scripts use in their headers.
ROLES: dict[str, str] = {
    # events
    "events": "event",  # hash  eid -> event row, its payload last
    # live rows, oldest first, in live buckets by received_at (event:live:<start>,
    # named after their roles like key buckets); the index lists the buckets'
    # starts, and "live" counts each bucket's entries and lists those that left
    "live": "event:live",  # hash  "" -> live rows; start -> entries; g start -> left
    "live_index": "event:live:index",  # lex   start (instant)
    "dead": "event:dead",  # lex   instant . eid
    "consumed": "event:consumed",  # lex   instant . eid
    # waits
    "wait_count": "wait:count",  # string  registered waits
    # a registered wait's row, in the wait bucket of its run (by a hash of the
    # run, like timer buckets; named after a script's roles like key buckets)
    "wait_bucket": "wait:<bucket>",  # hash  wid -> attrs (ns value . instant)...
    # key rows in registration order, in time buckets by created_at
    # (wait:order:<start>), like the live order
    "wait_order": "wait:order",  # hash  start -> entries; g start -> left
    "wait_order_index": "wait:order:index",  # lex   start (instant)
    "marks": "mark",  # hash  wid -> parked_at [eid held]   the claim ledger too
    "mark_index": "mark:index",  # lex   class byte . wid (L listable, B bare, S sealed run)
    # runs
    "seals": "seal",  # hash  run -> sealed_at
    # timers (member = tid . attrs, the same in each sorted set)
    "timer_walk": "timer:walk",  # score fire_at        unheld timers: claim_due's walk
    "timer_held": "timer:held",  # score lease expiry   timers under a lease
    "timer_held_fire": "timer:held:fire",  # score fire_at   the same timers
    "timer_claims": "timer:claim",  # hash  tid -> "claimed_at lease"
    "timer_bucket": "timer:<bucket>",  # hash  tid -> attrs   by a hash of the run
    # live events (the claim search) and unparked waits (the election) by
    # correlation key, in buckets by a hash of the key: a script's key buckets
    # follow its roles in KEYS, as many as it names
    "key_bucket": "event:key:<bucket>",  # lex  hash source . at . id | hash~from . at . wid
    # workers blocked on the server wait on it (BLPOP): at most two markers, "t" a
    # timer armed sooner than the walk's head, "r" a wait parked for redelivery
    "wake": "wake",  # list  markers
    # running workers, kept by their heartbeats
    "workers": "workers",  # hash  worker id -> "<last beat ms> <record JSON>"
    # how many buckets there are
    "geometry": "buckets",  # hash  family -> "<level> <split>"
    # call tokens of writing scripts
    "replies": "reply",  # hash  token -> reply      replies not yet acknowledged
    "replies_old": "reply:old",  # hash  token -> reply  the generation before
}

#: Roles whose key depends on the call: the bucket of a run (``TenantKeys.timer_bucket``),
#: and the buckets of correlation keys (``TenantKeys.key_bucket``), which follow a
#: script's roles rather than hold a place among them.
BUCKETED = frozenset({"timer_bucket", "key_bucket", "wait_bucket"})

#: The buckets a tenant starts with. A run's timers share one bucket, chosen by a
#: hash of the run; the buckets split one at a time (linear hashing) as the
#: tenant grows, so that each stays small enough for the server's compact
#: listpack encoding whatever the tenant's size.
BUCKET_BASE = 8
#: The average entries per bucket past which an insert into a bucket of more than
#: ``SPLIT_AT`` splits the next bucket.
BUCKET_LOAD = 16
SPLIT_AT = 48
#: The modulus of ``bucket_hash``: the largest prime below 2**32.
_HASH_PRIME = 4294967291


@dataclass(frozen=True, slots=True)
class Geometry:
    """How many buckets a family has: ``BUCKET_BASE * 2**level + split``. Buckets
    below ``split`` were split at this level: their entries are spread over them
    and their images ``split + BUCKET_BASE * 2**level``."""

    level: int = 0
    split: int = 0

    @classmethod
    def parse(cls, text: str | bytes) -> Geometry:
        raw = text.decode() if isinstance(text, bytes) else text
        level, split = raw.split()
        return cls(int(level), int(split))

    @property
    def count(self) -> int:
        return (BUCKET_BASE << self.level) + self.split

    def bucket(self, run: str) -> int:
        """The bucket of ``run``'s entries."""
        return self.bucket_of(bucket_hash(run))

    def bucket_of(self, h: int) -> int:
        """The bucket of the entries whose hash is ``h``."""
        span = BUCKET_BASE << self.level
        n = h % span
        return h % (2 * span) if n < self.split else n

    def text(self) -> str:
        return f"{self.level} {self.split}"


MAX_TENANT_BYTES = 64
_TENANT_FORBIDDEN = frozenset("/:{}")

#: The offset that makes every datetime's millisecond instant a 16-digit number.
INSTANT_OFFSET = 10**15


#: What a tenant name is trimmed of: ASCII white space only. Other white space at
#: either end is refused, so that ``"acme\xa0"`` neither addresses ``acme`` nor
#: makes a tenant that looks like it.
_TRIMMED = " \t\n\r\x0b\x0c"


def validate_tenant(tenant: object) -> str:
    """The trimmed tenant name, or ``InvalidInput``: 1..64 bytes of UTF-8 in NFC, no
    control or format character (Cc, Cf: zero-width and byte-order marks make
    look-alike tenants), none of ``/ : { }``, no other white space at either end."""
    if not isinstance(tenant, str):
        raise InvalidInput(f"tenant must be a str, not {type(tenant).__name__}")
    name = tenant.strip(_TRIMMED)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput("tenant is not encodable as UTF-8") from None
    if not 1 <= size <= MAX_TENANT_BYTES:
        raise InvalidInput(f"tenant must be 1..{MAX_TENANT_BYTES} bytes of UTF-8, got {size}")
    for ch in name:
        if ch in _TENANT_FORBIDDEN or unicodedata.category(ch) in ("Cc", "Cf"):
            raise InvalidInput(f"tenant may not contain {ch!r}")
    if name[0].isspace() or name[-1].isspace():
        raise InvalidInput(f"tenant {name!r} begins or ends with white space")
    if unicodedata.normalize("NFC", name) != name:
        raise InvalidInput(
            f"tenant {name!r} is not in Unicode normal form NFC: write it as"
            f" {unicodedata.normalize('NFC', name)!r}"
        )
    return name


_GLOB = frozenset("*?[]\\")


def glob_escape(text: str) -> str:
    """``text`` as a Redis glob pattern that matches only itself."""
    return "".join("\\" + c if c in _GLOB else c for c in text)


@dataclass(frozen=True, slots=True)
class TenantKeys:
    """The key names of one tenant."""

    tenant: str

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{{self.tenant}}}"

    def key(self, role: str) -> str:
        return f"{self.tag}:{ROLES[role]}"

    def for_roles(self, roles: Sequence[str], bucket: str = "") -> list[str]:
        """The keys of ``roles``; a bucketed role is the bucket of the run ``bucket``."""
        return [self.timer_bucket(bucket) if role in BUCKETED else self.key(role) for role in roles]

    def timer_bucket(self, run: str, geometry: Geometry = Geometry()) -> str:
        """The bucket hash holding the timers of ``run``, with ``geometry``'s buckets."""
        return f"{self.tag}:timer:{geometry.bucket(run)}"

    def timer_split(self, geometry: Geometry) -> list[str]:
        """The two buckets the next split of ``geometry`` writes: the bucket it
        splits and its image."""
        n = geometry.split
        return [f"{self.tag}:timer:{n}", f"{self.tag}:timer:{n + (BUCKET_BASE << geometry.level)}"]

    def timer_buckets(self, geometry: Geometry = Geometry()) -> list[str]:
        """Every timer bucket of the tenant, with ``geometry``'s buckets."""
        return [f"{self.tag}:timer:{n}" for n in range(geometry.count)]

    def key_bucket(self, n: int) -> str:
        """Key bucket ``n``: live events' claim-search entries and unparked waits'
        election entries, by correlation key (``docs/keys.md``, "Key buckets")."""
        return f"{self.tag}:event:key:{n}"

    def wait_bucket(self, n: int) -> str:
        """Wait bucket ``n``: the rows of the waits of the runs whose bucket it is
        (``docs/keys.md``, "Wait buckets")."""
        return f"{self.tag}:wait:{n}"

    def wait_buckets(self, geometry: Geometry = Geometry()) -> list[str]:
        """Every wait bucket of the tenant, with ``geometry``'s buckets."""
        return [self.wait_bucket(n) for n in range(geometry.count)]

    def wait_split(self, geometry: Geometry) -> list[str]:
        """The two wait buckets the next split of ``geometry`` writes."""
        n = geometry.split
        return [self.wait_bucket(n), self.wait_bucket(n + (BUCKET_BASE << geometry.level))]

    def time_bucket(self, suffix: str, start: str) -> str:
        """The time bucket of the family ``suffix`` (``event:live``, ``wait:order``)
        opened at ``start`` (an instant's 16 digits): its members of instants from
        then until the next bucket's start (``docs/keys.md``, "Time buckets")."""
        return f"{self.tag}:{suffix}:{start}"

    def live_bucket(self, start: str) -> str:
        """The live bucket opened at ``start``: live rows received from then."""
        return self.time_bucket("event:live", start)

    def order_bucket(self, start: str) -> str:
        """The registration order's bucket opened at ``start``: key rows of waits
        registered from then."""
        return self.time_bucket("wait:order", start)

    def key_buckets(self, geometry: Geometry = Geometry()) -> list[str]:
        """Every key bucket of the tenant, with ``geometry``'s buckets."""
        return [self.key_bucket(n) for n in range(geometry.count)]

    def key_split(self, geometry: Geometry) -> list[str]:
        """The two key buckets the next split of ``geometry`` writes."""
        n = geometry.split
        return [self.key_bucket(n), self.key_bucket(n + (BUCKET_BASE << geometry.level))]

    def acl_pattern(self) -> str:
        """The ACL key rule (``~`` and a glob pattern) that matches exactly this
        tenant's keys: the tenant name's glob characters ``* ? [ ] \\`` are escaped,
        so that tenant ``a*`` cannot reach tenant ``acme``."""
        return f"~{PREFIX}:{{{glob_escape(self.tenant)}}}:*"

    def all(
        self,
        geometry: Geometry = Geometry(),
        key_geometry: Geometry = Geometry(),
        wait_geometry: Geometry = Geometry(),
    ) -> list[str]:
        """Every key of the tenant but its time buckets: the fixed ones, then the
        timer buckets of ``geometry``, the key buckets of ``key_geometry`` and the
        wait buckets of ``wait_geometry``."""
        fixed = [self.key(role) for role in ROLES if role not in BUCKETED]
        return (
            fixed
            + self.timer_buckets(geometry)
            + self.key_buckets(key_geometry)
            + self.wait_buckets(wait_geometry)
        )


def bucket_hash(run: str | bytes) -> int:
    """A run's hash, as ``lua/_lib/buckets.lua`` computes it: each UTF-8 byte b in
    turn makes h = (h * 131 + b) mod 4294967291, from h = 0."""
    h = 0
    for b in run.encode("utf-8") if isinstance(run, str) else run:
        h = (h * 131 + b) % _HASH_PRIME
    return h


@lru_cache(maxsize=4096)
def key_hash(kind: str, namespace: str, value: str) -> int:
    """A correlation key's hash (with the kind it is sought for): ``bucket_hash`` of
    the components of (kind, namespace, value). Its 8 hex digits begin the key's
    entries in its key bucket, ``Geometry.bucket_of`` it picks the bucket."""
    return bucket_hash(tuple_member((kind, namespace, value)))


#: The bytes a component writes escaped: controls, space (its terminator) and "!".
_ESCAPED = re.compile(rb"[\x00-\x21]")
_ESCAPE = re.compile(rb"!(.)", re.DOTALL)


def component(value: str) -> bytes:
    """One order-preserving, self-delimiting component: the string's UTF-8 with each
    byte 0x00..0x21 written ``!`` and the byte plus 0x40, then a space."""
    return _component_bytes(value.encode("utf-8"))


#: A component's body: any byte but 0x00..0x21, each of those written "!" and a byte.
COMPONENT_BODY = rb"(?:[^\x00-\x21]|![\x40-\x61])*"
_BODY = re.compile(COMPONENT_BODY)


def _unescaped(body: bytes) -> bytes:
    """The bytes a component's body stands for; ValueError where no component has it."""
    if b"!" not in body and _ESCAPED.search(body) is None:
        return body
    if _BODY.fullmatch(body) is None:
        raise ValueError(f"not a component's body: {body!r}")
    return _ESCAPE.sub(lambda m: bytes([m.group(1)[0] - 0x40]), body)


def tuple_member(parts: Iterable[str]) -> bytes:
    """The concatenated components of ``parts``."""
    return b"".join(component(p) for p in parts)


def split_components(member: bytes) -> list[str]:
    """Inverse of ``tuple_member`` for a member made only of components."""
    out: list[str] = []
    pos = 0
    while pos < len(member):
        end = member.find(b" ", pos)
        if end < 0:
            raise ValueError(f"unterminated component in {member!r}")
        out.append(_unescaped(member[pos:end]).decode("utf-8"))
        pos = end + 1
    return out


def instant_member(ms: int) -> bytes:
    """The 16-digit, order-preserving form of an instant."""
    return b"%016d" % (ms + INSTANT_OFFSET)


def event_id(source: str, id: str) -> bytes:
    """The field under which an event row is stored: ``(source, id)`` injectively."""
    return tuple_member((source, id))


def _component_bytes(data: bytes) -> bytes:
    """``component`` of bytes that may not be UTF-8."""
    if _ESCAPED.search(data) is None:
        return data + b" "
    return _ESCAPED.sub(lambda m: b"!" + bytes([m.group()[0] + 0x40]), data) + b" "


#: An event row's state letters (``lua/_lib/events.lua``).
ROW_STATES = {b"L": "live", b"H": "held", b"C": "consumed", b"D": "dead"}
#: A row's first bytes: state, erased and targeted marks, received_at's 16 digits.
_ROW_HEAD = re.compile(rb"([LHCD])([e-])([t-]) (\d{16}) ")


def pack_event_row(fields: Sequence[bytes]) -> bytes:
    """An event row as stored, from its fields as ``unpack_event_row`` answers them:
    state letter, erased mark, targeted mark, received_at (16 digits), holder run,
    effect and claimed_at (all three empty in a row without a holder), kind, minter
    actor and basis, dead reason, each correlation key's namespace and value, and
    the payload."""
    state, erased, targeted, received, run, effect, claimed, *rest = fields
    payload = rest.pop()
    holder = b""
    if run or effect or claimed or state in (b"H", b"C"):
        holder = _component_bytes(run) + _component_bytes(effect) + claimed + b" "
    body = b"".join(_component_bytes(f) for f in rest)
    return b"%s%s%s %s %s%s\n%s" % (state, erased, targeted, received, holder, body, payload)


#: An escape of a row's field that escapes nothing: "!" not before 0x40..0x61. (A
#: row's field is otherwise taken as its bytes, as Lua reads it: control bytes
#: other than the line end, which ends the fields, are content.)
_BAD_ESCAPE = re.compile(rb"!(?![\x40-\x61])")


def _row_field(part: bytes) -> bytes:
    """A row's field from its component's body; ValueError for a bad escape."""
    if _BAD_ESCAPE.search(part) is not None:
        raise ValueError(f"a bad escape in {part!r}")
    return _ESCAPE.sub(lambda m: bytes([m.group(1)[0] - 0x40]), part)


def unpack_event_row(raw: bytes) -> list[bytes] | None:
    """The fields of a stored event row (``pack_event_row``'s, each component
    decoded), or None when it is not one."""
    head = _ROW_HEAD.match(raw)
    stop = raw.find(b"\n", 21)
    if head is None or stop <= 21 or raw[stop - 1] != 0x20:
        return None
    body = raw[21 : stop - 1]
    parts = body.split(b" ")
    if b"!" in body:
        try:
            parts = [_row_field(p) if b"!" in p else p for p in parts]
        except ValueError:
            return None
    letter = head[1]
    if letter in {b"H", b"C"}:
        holder, rest = parts[:3], parts[3:]
        if len(holder) < 3 or len(holder[2]) != 16 or not holder[2].isdigit():
            return None
    else:
        holder, rest = [b"", b"", b""], parts
    if len(rest) < 4 or len(rest) % 2:
        return None
    return [letter, head[2], head[3], head[4], *holder, *rest, raw[stop + 1 :]]


def timer_attrs(step: int, phase: str, case: str | None) -> bytes:
    """A timer's attributes as its bucket row and member hold them."""
    return b"%d%s%s" % (step, b"c" if phase == "compensating" else b"f", (case or "").encode())


def shell_word(value: str | bytes) -> str:
    """``value`` as one word of a POSIX shell: in single quotes where it is printable
    ASCII, else in bash's ``$'...'`` with each other byte as ``\\xNN``."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    if all(0x20 <= b < 0x7F for b in data):
        return "'" + data.decode("ascii").replace("'", "'\\''") + "'"
    out = []
    for b in data:
        if 0x20 <= b < 0x7F and b not in b"'\\":
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "$'" + "".join(out) + "'"


def redis_cli(*words: str | bytes) -> str:
    """A ``redis-cli`` command line that sends exactly these words."""
    return " ".join(["redis-cli", *(shell_word(w) for w in words)])


def locate_event(
    keys: TenantKeys,
    source: str,
    id: str,
    live: tuple[str, int, Sequence[tuple[str, str]]] | None = None,
    key_geometry: Geometry = Geometry(),
    *,
    live_start: str | None = None,
) -> list[str]:
    """The redis-cli commands that read one event's row, its payload last, and,
    for a live event (``live``: its kind, received_at in ms and correlation keys),
    its entry in its live bucket (the one opened at ``live_start``), scored by
    received_at less the bucket's start, and its claim-search entry in the key
    bucket of each key (with the buckets of ``key_geometry``), of score 0."""
    eid = event_id(source, id)
    lines = [redis_cli("HGET", keys.key("events"), eid) + "   # its row, the payload last"]
    if live is not None:
        kind, received, pairs = live
        if live_start is not None:
            bucket = keys.live_bucket(live_start)
            since = received + 10**15 - int(live_start)
            lines.append(redis_cli("ZSCORE", bucket, eid) + f"   # its live entry: {since}")
        for ns, value in pairs:
            h = key_hash(kind, ns, value)
            member = b"%08x " % h + component(source) + instant_member(received) + component(id)
            bucket = keys.key_bucket(key_geometry.bucket_of(h))
            lines.append(redis_cli("ZSCORE", bucket, member) + "   # its claim-search entry: 0")
    return lines


def locate_wait(
    keys: TenantKeys,
    run: str,
    effect: str,
    electable: tuple[str, str | None, Sequence[tuple[str, str]]] | None = None,
    key_geometry: Geometry = Geometry(),
    *,
    wait_geometry: Geometry = Geometry(),
) -> list[str]:
    """The redis-cli commands that read one wait's row (its attributes, then its
    keys, each with its registration time) in the wait bucket of its run (with
    the buckets of ``wait_geometry``) and its mark, and, for an unparked wait of
    an unsealed run (``electable``: its kind, from_source and correlation keys),
    the election entries under each key (with the buckets of ``key_geometry``),
    its own among them."""
    wid = tuple_member((run, effect))
    lines = [
        redis_cli("HGET", keys.wait_bucket(wait_geometry.bucket(run)), wid)
        + "   # its row: attributes, then each key and when it was registered",
        redis_cli("HGET", keys.key("marks"), wid)
        + "   # if parked: since (ms), then the event it holds, if any",
    ]
    if electable is not None:
        kind, source, pairs = electable
        for ns, value in pairs:
            h = key_hash(kind, ns, value)
            prefix = b"%08x~" % h + component(source or "")
            bucket = keys.key_bucket(key_geometry.bucket_of(h))
            lines.append(
                redis_cli("ZRANGEBYLEX", bucket, b"[" + prefix, b"(" + prefix + b"\xff")
                + "   # the election under this key, oldest first: its entry ends in its id"
            )
    return lines


def locate_timer(
    keys: TenantKeys, run: str, effect: str, attrs: bytes | None, geometry: Geometry = Geometry()
) -> list[str]:
    """The redis-cli commands that read one timer: its bucket row (with the
    buckets of ``geometry``) and, given its attributes, its fire time (in the
    walk, or held) and its last claim."""
    tid = tuple_member((run, effect))
    lines = [redis_cli("HGET", keys.timer_bucket(run, geometry), tid) + "   # its attributes"]
    if attrs is not None:
        member = tid + attrs
        lines += [
            redis_cli("ZSCORE", keys.key("timer_walk"), member) + "   # fire_at (ms), unheld",
            redis_cli("ZSCORE", keys.key("timer_held_fire"), member) + "   # fire_at (ms), held",
            redis_cli("HGET", keys.key("timer_claims"), tid) + "   # last claim: at, lease (ms)",
        ]
    return lines
