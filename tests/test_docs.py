"""The documentation agrees with the code it describes."""

from __future__ import annotations

import re
from pathlib import Path

import agentplane_redis
from agentplane_redis import ops
from agentplane_redis.keys import BUCKETED, ROLES, TIMER_BUCKETS, TenantKeys
from agentplane_redis.scripts import catalogue

ROOT = Path(__file__).resolve().parent.parent
KEYS_DOC = (ROOT / "docs" / "keys.md").read_text()


def test_the_script_table_matches_the_headers():
    """docs/keys.md lists each script with exactly its header's roles, in order."""
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (`.*`) \|$", KEYS_DOC, re.M))
    assert set(rows) == set(catalogue())
    for name, script in catalogue().items():
        assert re.findall(r"`([a-z_]+)`", rows[name]) == list(script.roles), name


def test_every_key_is_documented():
    """Each role's suffix and role name appear in the key table; the counts are right."""
    for role, suffix in ROLES.items():
        assert f"| `{suffix}` ({role}) |" in KEYS_DOC
    fixed = len(set(ROLES) - BUCKETED)
    assert f"fixed set of {fixed} keys" in KEYS_DOC
    assert f"up to {TIMER_BUCKETS:,} **timer buckets**" in KEYS_DOC
    assert len(TenantKeys("t").all()) == fixed + TIMER_BUCKETS


def test_the_bounds_table_matches_the_constants():
    """The documented batch sizes are the ones in ops.py."""
    for name in ("SWEEP_BATCH", "PURGE_BATCH", "PARKED_BATCH", "LIST_BATCH", "TIMER_SCAN"):
        assert f"| `{name}` | {getattr(ops, name)} |" in KEYS_DOC


def test_the_public_surface_is_pinned():
    """The package root exports exactly this list (kept sorted by ruff's RUF022)."""
    assert agentplane_redis.__all__ == [
        "JSON",
        "AgentplaneRedisError",
        "AsyncRedisStore",
        "Buffered",
        "BufferedEvent",
        "Closed",
        "CorrelationKey",
        "CorruptRow",
        "DeadLetter",
        "Duplicate",
        "DurabilityNotConfirmed",
        "EventRecord",
        "EventStats",
        "InboundEvent",
        "InvalidInput",
        "LibraryError",
        "LibraryMismatch",
        "LibraryMissing",
        "Matched",
        "Minter",
        "NotWaiting",
        "Operator",
        "OutcomeUnknown",
        "Phase",
        "RedisStore",
        "Resumed",
        "Retired",
        "ServerBusy",
        "ServerMisconfigured",
        "Subscription",
        "Timer",
        "TimerRecord",
        "WaitRecord",
    ]
