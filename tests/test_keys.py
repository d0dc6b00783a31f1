"""The encodings of keys.py and lua/_lib/codec.lua: injective, order-preserving, equal."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from agentplane_redis.codec import MAX_INSTANT, MIN_INSTANT
from agentplane_redis.keys import (
    TenantKeys,
    component,
    instant_member,
    pack_row,
    split_components,
    tuple_member,
    unpack_row,
)
from agentplane_redis.scripts import expand, lua_root

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


@given(st.lists(st.binary(max_size=20), max_size=5))
def test_rows_round_trip(fields):
    """Netstring rows read back field for field."""
    assert unpack_row(pack_row(fields)) == fields


@pytest.mark.parametrize("bad", [b"3:ab,", b"2:ab", b"x:ab,", b"2:abc", b":,"])
def test_a_broken_row_is_not_read(bad):
    """Short, long or non-numeric lengths are refused."""
    assert unpack_row(bad) is None


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


# The raw client is reused across examples on purpose: the scripts write nothing.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(TUPLES, st.integers(MIN_INSTANT, MAX_INSTANT))
def test_lua_and_python_encode_alike(raw, parts, ms):
    """The Lua codec writes the bytes keys.py documents, and reads them back."""
    encoded = raw.eval(LUA_ENCODE, 0, *parts, str(ms))
    assert encoded == tuple_member(parts) + instant_member(ms)
    decoded = raw.eval(LUA_DECODE, 0, tuple_member(parts), len(parts))
    assert [d.decode("utf-8") for d in decoded] == parts
    assert component(parts[0]).endswith(b"\x00\x01")


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
