"""The encodings of keys.py and lua/_lib/codec.lua: injective, order-preserving, equal."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from agentplane_redis import codec
from agentplane_redis.codec import MAX_INSTANT, MIN_INSTANT, replayed
from agentplane_redis.keys import (
    ROW_STATES,
    TenantKeys,
    _component_bytes,
    component,
    event_id,
    instant_member,
    pack_event_row,
    split_components,
    tuple_member,
    unpack_event_row,
)
from agentplane_redis.model import Phase
from agentplane_redis.scripts import expand, lua_root


def on_a_server(examples: int) -> Any:
    """Hypothesis settings of a test that sends its examples to a server: no deadline,
    and the raw client reused across examples on purpose (the scripts write nothing)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
TUPLES = st.lists(TEXT, min_size=1, max_size=3)


def as_bytes(parts: list[str]) -> list[bytes]:
    return [p.encode("utf-8") for p in parts]


@given(TUPLES, TUPLES)
def test_tuples_encode_injectively_and_in_order(a, b):
    """Encoded members compare exactly as the tuples compare, by bytes, prefix first."""
    ea, eb = tuple_member(a), tuple_member(b)
    assert (ea == eb) == (a == b)
    if len(a) == len(b):
        assert (ea < eb) == (as_bytes(a) < as_bytes(b))


@given(TUPLES)
def test_components_split_back(parts):
    """split_components inverts tuple_member."""
    assert split_components(tuple_member(parts)) == parts


@given(st.integers(MIN_INSTANT, MAX_INSTANT), st.integers(MIN_INSTANT, MAX_INSTANT))
def test_instants_sort_as_times(a, b):
    """Fixed-width instants compare as the numbers they encode, negative ones included."""
    ea, eb = instant_member(a), instant_member(b)
    assert len(ea) == 16
    assert (ea < eb) == (a < b)


INSTANT = st.integers(MIN_INSTANT, MAX_INSTANT).map(instant_member)


@st.composite
def event_rows(draw: st.DrawFn) -> list[bytes]:
    """The fields of an event row as ``unpack_event_row`` answers them: any bytes in
    its components (spaces, "!", controls and bytes that are not UTF-8 included)."""
    field = st.binary(max_size=12)
    letter = draw(st.sampled_from([b"L", b"H", b"C", b"D"]))
    holder = [draw(field), draw(field), draw(INSTANT)] if letter in b"HC" else [b"", b"", b""]
    keys = draw(st.lists(field, min_size=0, max_size=3).map(lambda k: [*k, *k]))
    head = [letter, draw(st.sampled_from([b"e", b"-"])), draw(st.sampled_from([b"t", b"-"]))]
    rest = [draw(field) for _ in range(4)]
    return [*head, draw(INSTANT), *holder, *rest, *keys, draw(st.binary(max_size=30))]


@given(event_rows())
def test_event_rows_round_trip(fields):
    """An event row reads back field for field, whatever bytes its fields hold."""
    assert unpack_event_row(pack_event_row(fields)) == fields


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"X-- 1001767225600000 k    \n",  # an unknown state
        b"Lx- 1001767225600000 k    \n",  # a bad mark
        b"L-- 100176722560000 k    \n",  # received_at of 15 digits
        b"L-- 1001767225600000 k    ",  # no end of the fields
        b"L-- 1001767225600000 k   \n",  # three fields
        b"L-- 1001767225600000 k    n \n",  # half a key
        b"L-- 1001767225600000 k!    \n",  # "!" escaping nothing
        b"L-- 1001767225600000 k!z    \n",  # "!" escaping a byte no escape stands for
        b"H-- 1001767225600000 r e k    \n",  # a holder cut short
        b"H-- 1001767225600000 r e 1 k    n v \n",  # claimed_at of one digit
    ],
)
def test_a_broken_event_row_is_not_read(bad):
    """Rows that are not the format are refused, never read as something close."""
    assert unpack_event_row(bad) is None


def test_tenant_keys_share_one_hash_tag():
    """Every key of a tenant is agentplane:{tenant}:..., matched by its ACL pattern."""
    keys = TenantKeys("acme").all()
    assert all(k.startswith("agentplane:{acme}:") for k in keys)
    assert len(set(keys)) == len(keys)
    assert TenantKeys("acme").acl_pattern() == "~agentplane:{acme}:*"


CODEC = expand(lua_root(), "_lib/codec.lua")
LUA_ENCODE = (
    CODEC
    + """
local out = {}
for i = 1, #ARGV - 1 do
  out[i] = enc(ARGV[i])
end
out[#ARGV] = instant_key(tonumber(ARGV[#ARGV]))
return table.concat(out)
"""
)
LUA_DECODE = (
    CODEC
    + """
local parts = take(ARGV[1], 1, tonumber(ARGV[2]))
local out = {}
for i, p in ipairs(parts) do
  out[i] = dec(p)
end
return out
"""
)


@on_a_server(60)
@given(TUPLES, st.integers(MIN_INSTANT, MAX_INSTANT))
def test_lua_and_python_encode_alike(raw, parts, ms):
    """The Lua codec writes the bytes keys.py documents, and reads them back."""
    encoded = raw.eval(LUA_ENCODE, 0, *parts, str(ms))
    assert encoded == tuple_member(parts) + instant_member(ms)
    decoded = raw.eval(LUA_DECODE, 0, tuple_member(parts), len(parts))
    assert [d.decode("utf-8") for d in decoded] == parts
    assert component(parts[0]).endswith(b" ")


LUA_HASH = (
    "local K = {}\n"
    + CODEC
    + expand(lua_root(), "_lib/core.lua")
    + expand(lua_root(), "_lib/buckets.lua")
    + """
local out = {}
for i = 1, #ARGV do
  out[i] = string.format("%d", bucket_hash(ARGV[i]))
end
return out
"""
)


@on_a_server(60)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=8))
def test_lua_and_python_hash_alike(raw, strings):
    """bucket_hash in Lua, which reads a string eight bytes a call and its last few in
    one, gives keys.py's hash of the same bytes, at every length."""
    from agentplane_redis.keys import bucket_hash

    hashed = raw.eval(LUA_HASH, 0, *strings)
    assert [int(h) for h in hashed] == [bucket_hash(s) for s in strings]


@given(st.text(st.characters(codec="utf-8", exclude_characters="/:{}"), min_size=1, max_size=20))
def test_every_key_of_a_tenant_lands_in_one_cluster_slot(name):
    """The hash tag puts a tenant's keys, every script's KEYS with them, in one slot."""
    from redis.crc import key_slot

    from agentplane_redis.codec import InvalidInput
    from agentplane_redis.keys import validate_tenant

    try:
        tenant = validate_tenant(name)
    except InvalidInput:
        return
    slots = {key_slot(k.encode()) for k in TenantKeys(tenant).all()}
    assert len(slots) == 1


LUA_NUMBERS = (
    CODEC
    + """
local out = {}
for i = 1, #ARGV do
  local n = tonumber(ARGV[i])
  out[2 * i - 1] = instant_key(n)
  out[2 * i] = decimal(n)
end
return out
"""
)
EDGES = [0, 1, 9, 10, 99, 100, 101, 9999, 10**4, 10**8 - 1, 10**8, 10**8 + 1, 10**12]
EDGES += [1767225600000, 10**15 - 1, MIN_INSTANT, MAX_INSTANT, 2**53 - 1]


@on_a_server(20)
@given(st.lists(st.integers(-(2**53) + 1, 2**53 - 1), min_size=1, max_size=200))
def test_lua_prints_numbers_as_python_does(raw, numbers):
    """instant_key and decimal print whole numbers with arithmetic, as string.format
    would: every digit, both signs, zero, and past the fast range (10^15, 2^53)."""
    numbers = numbers + EDGES + [-n for n in EDGES]
    printed = raw.eval(LUA_NUMBERS, 0, *map(str, numbers))
    for i, n in enumerate(numbers):
        key, text = printed[2 * i].decode(), printed[2 * i + 1].decode()
        assert text == str(n)
        if abs(n + 10**15) < 2**53:  # past that, n + 10^15 is not a whole double
            assert key == f"{n + 10**15:016d}"


def test_lua_prints_minus_zero_and_fractions_as_string_format(raw):
    """What the arithmetic does not print falls back to string.format, unchanged."""
    printed = raw.eval(LUA_NUMBERS, 0, "-0", "0", "2.5", "-3.5", "1e300")
    assert [p.decode() for p in printed[:6]] == [
        "1000000000000000",
        "-0",
        "1000000000000000",
        "0",
        "1000000000000002",
        "2",
    ]
    assert printed[7] == b"-4"
    assert printed[9].startswith(b"10000000000000000525047602552044202487044685811081591549158")


# A timer row is read by two pattern matches where it has the usual form, and
# by the whole check otherwise: the quick read must never accept a row the
# whole check refuses, nor read one differently.
TIMER_MEMBERS = (
    CODEC
    + expand(lua_root(), "_lib/core.lua")
    + expand(lua_root(), "_lib/timers.lua")
    + """
local out = {}
for i = 1, #ARGV do
  local ok, tid = pcall(member_tid, ARGV[i])
  out[i] = ok and tid or false
end
return out
"""
)
MEMBER_PARTS = st.one_of(
    st.binary(max_size=8),
    st.sampled_from([b" ", b"!", b"!@", b"!a", b"0", b"4294967295", b"99999999999", b"f", b"c"]),
    TEXT.map(lambda t: t.encode("utf-8")),
)


@on_a_server(60)
@given(st.lists(st.lists(MEMBER_PARTS, max_size=6).map(b"".join), min_size=1, max_size=60))
def test_lua_and_python_accept_the_same_timer_members(raw, members):
    """Whatever a walk member holds, the scripts' check (member_tid) and the codec's
    read agree on the id's shape, and Python refuses as CorruptRow what it cannot read;
    members the library writes pass both."""
    from agentplane_redis.codec import timer_member
    from agentplane_redis.errors import CorruptRow

    written = [tuple_member(["r", "e"]) + b"0f", tuple_member(["r\x00", ""]) + b"4294967295cx\x00y"]
    for member, tid in zip(
        written + members, raw.eval(TIMER_MEMBERS, 0, *written, *members), strict=True
    ):
        try:
            timer = timer_member(member, b"1767225600000")
        except CorruptRow:
            timer = None
        if timer is not None:
            assert tid == tuple_member([timer.run, timer.effect]), member
        elif member in written:
            raise AssertionError(member)


#: The wait helpers (wait_parse reads no key).
WAITS_LUA = (
    "local K = {}\n"
    + CODEC
    + expand(lua_root(), "_lib/core.lua")
    + expand(lua_root(), "_lib/buckets.lua")
    + expand(lua_root(), "_lib/waits.lua")
)

WAIT_ATTRS = (
    WAITS_LUA
    + """
-- ARGV: kind, step, phase, case, from_source for each wait, five at a time; for
-- each, its attributes written into a row of one key and read back by
-- wait_parse, or the corruption found.
local out = {}
for i = 1, #ARGV, 5 do
  local attrs = attrs_of(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
  local wid = enc("r") .. enc("e")
  local ok, read = pcall(wait_parse, wid, attrs[A_TEXT] .. enc("ns") .. enc("v") .. instant_key(0))
  out[#out + 1] = ok and read[A_TEXT] or "corrupt"
end
return out
"""
)
WAIT_VALUES = {
    "kind": [b"payment.settled", b"k", b"a b", b"!", b"\x00\x01", b"x" * 300],
    "step": [b"0", b"7", b"4294967295", b"4294967296", b"-1", b"1.0", b""],
    "phase": [b"forward", b"compensating"],
    "case": [b"", b"pay", b"a b", b"!x", b"\x00"],
    "from_source": [b"", b"stripe", b" ", b"a!b"],
}


def test_a_wait_s_attributes_read_back_from_its_row_as_written(raw):
    """Each attribute made odd in turn (spaces, '!', controls, long, empty): the row
    carries it and reads it back as written; a step out of range or an empty kind
    reads as corrupt, never as another wait."""
    base = [b"payment.settled", b"7", b"forward", b"", b""]
    cases = []
    for i, values in enumerate(WAIT_VALUES.values()):
        for value in values:
            cases.append([*base[:i], value, *base[i + 1 :]])
    cases.append([b"", b"0", b"forward", b"", b""])
    flat = [v for case in cases for v in case]
    for case, got in zip(cases, raw.eval(WAIT_ATTRS, 0, *flat), strict=True):
        kind, step = case[0], case[1]
        valid = kind != b"" and step.isdigit() and int(step) <= 2**32 - 1
        if valid:
            kind, _, phase, case_, from_source = (v.decode() for v in case)
            assert codec.wait_attrs("wait", got) == (
                kind,
                int(step),
                Phase(phase),
                case_ or None,
                from_source or None,
            ), case
        else:
            assert got == b"corrupt", case


WAIT_ROWS = (
    WAITS_LUA
    + """
-- ARGV[1]: a wait's row. Returns wait_parse's reading: the attributes' text, kind
-- and from_source, then each key row's ns, value and created_at; or "corrupt".
local ok, attrs, rows = pcall(wait_parse, enc("r") .. enc("e"), ARGV[1])
if not ok then
  return { "corrupt" }
end
local out = { attrs[A_TEXT], attrs[A_KIND], attrs[A_FROM] }
for _, row in ipairs(rows) do
  out[#out + 1] = row.ns
  out[#out + 1] = row.value
  out[#out + 1] = row.at
  assert(row.nv == row.ns .. row.value)
end
return out
"""
)


@given(
    st.sampled_from([b"k", b"payment.settled", b"x" * 700]),
    st.sampled_from([b"", b"c", b"c" * 600]),
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=300),
            st.sampled_from([b"1001767225600000", b"1001767225600001", b"17", b"10017672256000x0"]),
        ),
        min_size=0,
        max_size=4,
    ),
    st.sampled_from([None, b" ", b"!", b"\x00", b"7f"]),
)
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_wait_parse_reads_a_row_as_written_or_finds_it_corrupt(raw, kind, case, keys, cut):
    """Rows short and long (past 64 bytes, with escaped bytes), of no key or several,
    their created_at well formed or not, or with a byte cut out: a row written whole
    reads back as written, and whatever wait_parse reads of any row writes back
    into exactly that row, so that no row reads as another wait."""
    c = _component_bytes
    attrs = c(kind) + b"7f " + c(case) + c(b"")
    row = attrs + b"".join(c(b"ns") + c(value) + at for value, at in keys)
    if cut is not None and row.find(cut) >= 0:
        where = row.find(cut)
        row = row[:where] + row[where + len(cut) :]
    got = raw.eval(WAIT_ROWS, 0, row)
    well_formed = keys and all(at.isdigit() and len(at) == 16 for _, at in keys)
    if cut is None and well_formed:
        want = [attrs, c(kind), c(b"")]
        for value, at in keys:
            want += [c(b"ns"), c(value), at]
        assert got == want
    if got != [b"corrupt"]:
        assert got[0] + b"".join(got[3:]) == row
        assert got[1] != b" "
        assert got[3:]
        assert len(got[3:]) % 3 == 0
        assert all(len(at) == 16 and at.isdigit() for at in got[5::3])


#: The event row helpers, with the keys they name bound as a script's are: a test's
#: KEYS are the events, consumed, live and geometry keys, then the key buckets
#: (``EVENT_KEYS``).
EVENTS_LUA = (
    CODEC
    + "local K = { events = KEYS[1], consumed = KEYS[2], live = KEYS[3], geometry = KEYS[4],"
    + " live_index = KEYS[5], roles = 5 }\nlocal GEO\n"
    + expand(lua_root(), "_lib/core.lua")
    + expand(lua_root(), "_lib/buckets.lua")
    + expand(lua_root(), "_lib/events.lua")
)
#: The keys of EVENTS_LUA: the roles, then every key bucket of a new tenant.
EVENT_KEYS = (
    "{t}:e",
    "{t}:c",
    "{t}:l",
    "{t}:buckets",
    "{t}:li",
    *(f"{{t}}:event:key:{n}" for n in range(8)),
)

EVENT_ROWS = (
    EVENTS_LUA
    + """
-- ARGV: an eid and a row: the row's fields as event_fields reads them (false
-- where it reads none), then the fields again as event_pack writes them.
local f = event_fields(ARGV[1], ARGV[2])
if not f then
  return false
end
local out = {}
for i = 1, #f do
  out[i] = f[i]
end
out[#f] = event_payload(f)
out[#out + 1] = event_pack(f)
return out
"""
)


def lua_fields(fields: list[bytes]) -> list[bytes]:
    """The fields of a row as the scripts hold them (``lua/_lib/events.lua``),
    from ``unpack_event_row``'s, for the event ("s", "i")."""
    letter, erased, targeted, received, run, effect, claimed, *rest = fields
    state = ROW_STATES[letter].encode()
    kind, actor, basis, reason, *keys = rest
    marks = [b"1" if erased == b"e" else b"0", b"1" if targeted == b"t" else b"0"]
    return [
        state,
        b"s",
        b"i",
        kind,
        received,
        actor,
        basis,
        run,
        effect,
        claimed,
        reason,
        *marks,
        *keys,
    ]


def read_in_lua(raw: Any, row: bytes) -> Any:
    """EVENT_ROWS's answer for the row of the event ("s", "i")."""
    return raw.eval(EVENT_ROWS, len(EVENT_KEYS), *EVENT_KEYS, event_id("s", "i"), row)


@on_a_server(60)
@given(event_rows())
def test_lua_reads_and_writes_event_rows_as_python_does(raw, fields):
    """One row format: Lua reads what Python writes field for field, and writes
    those fields back as the same bytes."""
    row = pack_event_row(fields)
    out = read_in_lua(raw, row)
    assert out is not None
    assert out[:-1] == lua_fields(fields)
    assert out[-1] == row


@on_a_server(1)
@given(st.sampled_from([b"\x01", b"\t", b"\x1f"]))
def test_a_control_byte_in_a_row_s_field_is_content_to_lua_and_python(raw, byte):
    """A row's field holding a control byte unescaped (no writer makes one) is read
    by Lua and Python alike, as that byte, and written back escaped."""
    row = b"L-- 1001767225600000 k" + byte + b"    n v \n{}"
    fields = unpack_event_row(row)
    assert fields is not None
    assert fields[7] == b"k" + byte
    out = read_in_lua(raw, row)
    assert out[:-1] == lua_fields(fields)
    assert out[-1] == pack_event_row(fields) != row


EVENT_PATCHES = (
    EVENTS_LUA
    + """
-- ARGV: a held row's text, then claimed_at: the row re-stamped and shed, as
-- patched and as packed anew.
local out = {}
local f = event_fields("s i ", ARGV[1])
local head = event_restamp("s i ", f, ARGV[2])
out[1], out[2] = redis.call("HGET", K.events, "s i "), head
f = event_fields("s i ", out[1])
shed("s i ", f)
out[3] = redis.call("HGET", K.events, "s i ")
local g = event_fields("s i ", ARGV[1])
g[E_CLAIMED] = ARGV[2]
out[4], out[5] = event_pack(g), event_head(g)
g[E_STATE], g[#g] = "consumed", ""
out[6] = event_pack(g)
-- ARGV[3]: the same row live, without a claim: held by (ARGV[4], ARGV[5]) at ARGV[6] ms.
-- Its live bucket, the last key, opened at its received_at.
f = event_fields("s i ", ARGV[3])
redis.call("ZADD", K.live_index, "0", f[E_RECEIVED])
redis.call("ZADD", KEYS[#KEYS], "0", "s i ")
redis.call("HSET", K.live, f[E_RECEIVED], 1, "", 1)
out[7] = hold("s i ", f, ARGV[4], ARGV[5], enc_pair(ARGV[4], ARGV[5]), tonumber(ARGV[6]))
out[8] = redis.call("HGET", K.events, "s i ")
g = event_fields("s i ", ARGV[3])
g[E_STATE], g[E_RUN], g[E_EFFECT], g[E_CLAIMED] = "held", ARGV[4], ARGV[5], ARGV[2]
out[9], out[10] = event_head(g), event_pack(g)
redis.call("DEL", K.events, K.consumed, K.live, K.live_index, KEYS[#KEYS])
return out
"""
)


@on_a_server(60)
@given(event_rows(), st.binary(min_size=1, max_size=12), st.integers(MIN_INSTANT, MAX_INSTANT))
def test_a_held_row_patched_in_place_is_the_row_written_anew(raw, fields, effect, at):
    """A claim re-stamped (claim_for's own-claim recovery), a claim shed
    (unsubscribe) and a live row held (a claim or an election) patch the stored
    text where the fields sit: exactly the bytes of the row packed anew."""
    run = fields[4] or b"r"
    held = [b"H", b"-", fields[2], fields[3], run, effect, fields[6] or fields[3], *fields[7:]]
    live = [b"L", b"-", b"-", fields[3], b"", b"", b"", *fields[7:]]
    keys = (*EVENT_KEYS, f"{{t}}:event:live:{fields[3].decode()}")
    out = raw.eval(
        EVENT_PATCHES,
        len(keys),
        *keys,
        *(pack_event_row(held), instant_member(at), pack_event_row(live), run, effect, at),
    )
    stamped, head, consumed, want, want_head, want_consumed = out[:6]
    assert (stamped, head, consumed) == (want, want_head, want_consumed)
    held_head, held_row, want_held_head, want_held = out[6:]
    assert (held_head, held_row) == (want_held_head, want_held)


LUA_INSTANT_TEXT = (
    CODEC
    + """
local out = {}
for i = 1, #ARGV do
  local n = instant_of(ARGV[i])
  out[3 * i - 2] = n and instant_key(n) or false
  out[3 * i - 1] = n and decimal(n) or false
  out[3 * i] = n and string.format("%016.0f", n + 1e15) .. "/" .. string.format("%.0f", n) or false
end
return out
"""
)


@on_a_server(20)
@given(
    st.lists(
        st.integers(MIN_INSTANT, MAX_INSTANT).map(str)
        | st.sampled_from(["007", "0", "-0", "-5", "1e3", " 12", "12 ", "0x10", "1.5", "x"])
        | st.sampled_from(["0001767225600000", "999999999999999"])
        | st.integers(10**14, 10**16).map(str),
        min_size=1,
        max_size=50,
    )
)
def test_an_instant_s_text_prints_as_string_format_would(raw, texts):
    """instant_of sets the printing memos from an instant's own text only where that
    text is what printing the number gives: every text, in any order, prints after
    it as string.format prints its number."""
    out = raw.eval(LUA_INSTANT_TEXT, 0, *texts)
    for i in range(len(texts)):
        key, text, formatted = out[3 * i], out[3 * i + 1], out[3 * i + 2]
        if formatted:
            assert key + b"/" + text == formatted


def lua_literal(value: Any) -> str:
    """A reply value (bytes, an int, a list of them) as Lua source."""
    if isinstance(value, bytes):
        return '"' + "".join(f"\\{b}" for b in value) + '"'
    if isinstance(value, int):
        return str(value)
    return "{" + ", ".join(lua_literal(v) for v in value) + "}"


REPLY_VALUES = st.recursive(
    st.binary(max_size=40) | st.integers(-(2**53), 2**53),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


@on_a_server(60)
@given(st.lists(REPLY_VALUES, min_size=1, max_size=8))
def test_a_reply_as_its_text_reads_back_as_the_array_redis_sends(raw, reply):
    """A writing call's reply goes as the text it remembers (core.lua's serialize) and
    is read back by codec.replayed: the same list Redis makes of the table, elements,
    nesting and integers alike."""
    script = (
        CODEC
        + expand(lua_root(), "_lib/core.lua")
        + f"""
local v = {lua_literal(reply)}
local out = {{}}
return {{ table.concat(out, "", 1, serialize(v, out, 0)), v }}
"""
    )
    text, array = raw.eval(script, 0)
    assert replayed(text) == array == reply


DIRECT_TEXTS = (
    CODEC
    + expand(lua_root(), "_lib/core.lua")
    + expand(lua_root(), "_lib/buckets.lua")
    + expand(lua_root(), "_lib/events.lua")
    + expand(lua_root(), "_lib/waits.lua")
    + expand(lua_root(), "_lib/matching.lua")
    + """
-- ARGV: status, stamp, run, effect, attributes, row, has payload, then the keys.
local keys = {}
for i = 8, #ARGV do
  keys[#keys + 1] = ARGV[i]
end
local function text(v)
  local out = {}
  return table.concat(out, "", 1, serialize(v, out, 0))
end
local status, stamp = ARGV[1], ARGV[2]
local sub = { ARGV[3], ARGV[4], ARGV[5], keys }
local has = ARGV[7]
return {
  sub_status(status, stamp, sub).text,
  text({ status, stamp, sub }),
  hit_text(stamp, ARGV[6], has),
  text({ "HIT", stamp, ARGV[6], has == "1" and "R" or has, "" }),
}
"""
)


@on_a_server(60)
@given(
    st.sampled_from([b"RESUMED", b"MATCHED"]),
    st.lists(st.binary(max_size=300), min_size=4, max_size=4),
    st.sampled_from([b"0", b"1"]),
    st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=3).map(
        lambda values: [part for v in values for part in (b"ns", v)]
    ),
)
def test_the_hot_replies_texts_are_serialize_s(raw, status, parts, has_payload, keys):
    """The texts that a subscription's reply (sub_status) and a claim's HIT (hit_text)
    are remembered as, written by one concatenation, are serialize's of the same
    reply, whatever their lengths and bytes and however many keys."""
    stamp, run, effect, row = parts
    direct, serialized, hit, hit_serialized = raw.eval(
        DIRECT_TEXTS,
        0,
        status,
        stamp or b"0",
        run,
        effect,
        b"payment.settled 0f  ",
        row,
        has_payload,
        *keys,
    )
    assert direct == serialized
    assert hit == hit_serialized
