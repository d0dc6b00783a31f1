"""Tenant isolation by ACL (contract 7.1): a tenant's user runs every operation on its
own tenant and gets NOPERM on every other, whatever characters the names hold."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from agentplane_redis import InvalidInput, RedisStore, acl
from agentplane_redis.cli import EXIT_REFUSED, main
from agentplane_redis.keys import TenantKeys
from agentplane_redis.scripts import catalogue

from conftest import CLUSTER_TENANTS
from helpers import at, ev, sub, timer

#: Tenant names with every kind of character a tenant may hold, glob ones included.
TENANTS = [
    "acme",
    "a*",
    "ac[m]e",
    "a?me",
    "a[!c]me",
    "back\\slash",
    "zürich",
    "[",
    "]",
    "*",
    "?",
    "\\",
    "a-b.c_d",
    "ac",
]


def test_the_pattern_escapes_glob_characters():
    """Each glob character of a tenant name is escaped, and nothing else."""
    assert TenantKeys("acme").acl_pattern() == "~agentplane:{acme}:*"
    assert TenantKeys("a*").acl_pattern() == "~agentplane:{a\\*}:*"
    assert TenantKeys("ac[m]e").acl_pattern() == "~agentplane:{ac\\[m\\]e}:*"
    assert TenantKeys("a?\\").acl_pattern() == "~agentplane:{a\\?\\\\}:*"


def test_the_grant_names_exactly_the_commands_the_scripts_call():
    """SCRIPT_COMMANDS is the set of commands in lua/, read out of the scripts."""
    called = set()
    for script in catalogue().values():
        called |= {c.lower() for c in re.findall(r'redis\.p?call\("([A-Za-z]+)"', script.source)}
    assert called == set(acl.SCRIPT_COMMANDS)


def test_the_grant_follows_the_server_version():
    """Redis 7.0 has no WAITAOF (a rule naming it is refused): WAIT there, WAITAOF later."""
    assert "waitaof" not in acl.commands({"redis_version": "7.0.15"})
    assert "wait" in acl.commands({"redis_version": "7.0.15"})
    assert "waitaof" in acl.commands({"redis_version": "7.2.4", "valkey_version": "8.1.1"})
    assert "waitaof" in acl.commands({"redis_version": "7.4.0"})


def exercise_listings(store: Any) -> None:
    """The listings' pages and counts, on the store's own tenant."""
    store.events.dead_letters_page(10)
    store.events.waiting_page(10)
    store.events.parked_waits_page(1)
    store.events.live_page(5, newest=True)
    store.timers.next_claim_in()
    store.timers.stats()
    _page, cursor = store.timers.pending_page(1)
    store.timers.pending_page(1, cursor)  # ZRANK after the cursor's member


def exercise(store: Any) -> None:
    """Every public operation, once, on the store's own tenant."""
    e, w = ev("e1", "k/1"), sub("r", "w", "k/1")
    ev_, tm, rn = store.events, store.timers, store.runs
    assert ev_.buffer(e, at=at(0))
    ev_.subscribe(sub("r", "w2", "k/2"), at=at(0))
    assert ev_.claim_for(w, at=at(1)) is not None
    assert ev_.match_waiter(e, at=at(1)) is None
    ev_.deliver_to("r", ev("e2", "k/2"), at=at(2))
    ev_.deliver(ev("e3", "k/3"), at=at(3))
    ev_.wait(sub("q", "w", "k/3"), at=at(4))
    ev_.unsubscribe("q", "w")
    ev_.park_wait(sub("p", "w", "k/9"), at=at(5))
    ev_.parked_waits()
    ev_.erase_payload("src", "e2")
    ev_.minter("src", "e1")
    ev_.buffer(ev("e4", "k/4"), at=at(6))
    ev_.sweep_unclaimed(at(10))
    ev_.dead_letters()
    ev_.waiting()
    ev_.purge(at(10))
    ev_.stats()
    ev_.buffer(ev("e5", "k/5"), at=at(20))
    ev_.sweep_unclaimed(at(20))
    assert ev_.revive("src", "e5", at=at(21)) is not None
    ev_.unsubscribe_run("p")
    assert tm.arm(timer("r", "t", 0))
    tm.arm(timer("r", "u", 0))
    tm.claim_due(now=at(1), lease=timedelta(seconds=5))
    tm.disarm("r", "u")
    tm.pending_count()
    tm.pending()
    tm.armed("r")
    tm.next_due()
    exercise_listings(store)
    tm.lookup("r", "t")
    assert tm.reschedule("r", "t", at(50), release=True)
    tm.wait_for_wake(0.05)  # BLPOP on the tenant's wake list
    store.workers.heartbeat("w:1", {"host": "h"}, timedelta(seconds=30))
    assert [w.worker for w in store.workers.running()] == ["w:1"]
    store.runs.lookup("r")
    tm.disarm_run("nobody")
    rn.seal("s")
    rn.is_sealed("s")
    rn.close("r", ["w"])


@pytest.mark.real
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_each_tenants_user_reaches_its_tenant_and_nothing_else(start, kind):
    """For every tenant name: its user runs every operation on it and gets NOPERM, read
    or write, on every other tenant."""
    server = start(kind, appendonly=True)
    admin = redis.Redis(port=server.port)
    users = {}
    for n, tenant in enumerate(TENANTS):
        # One tenant also confirms its writes (WAITAOF, and INFO granted to plan it);
        # Redis 7.0 would need a replica for WAIT.
        users[tenant] = acl.create_tenant_user(
            admin, tenant, f"pw{n}", f"user{n}", grant_info=kind == "valkey" and n == 0
        )
    for n, tenant in enumerate(TENANTS):
        client = redis.Redis(port=server.port, username=users[tenant], password=f"pw{n}")
        durability = "acknowledged" if kind == "valkey" and n == 0 else "fast"
        exercise(RedisStore(client, tenant=tenant, durability=durability))
        for other in TENANTS:
            if other == tenant:
                continue
            intruder = RedisStore(client, tenant=other)
            with pytest.raises(redis.exceptions.NoPermissionError):
                intruder.events.stats()
            with pytest.raises(redis.exceptions.NoPermissionError):
                intruder.events.buffer(ev("x", "k/1"), at=at(0))
            with pytest.raises(redis.exceptions.NoPermissionError):
                intruder.timers.claim_due()
        client.close()
    for tenant in TENANTS:
        store = RedisStore(admin, tenant=tenant)
        assert store.events.minter("src", "x") is None, f"an intruder wrote into {tenant!r}"


@pytest.mark.real
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_on_a_cluster_each_tenants_user_is_on_every_node(start_cluster, kind):
    """On a cluster the user is created on every node, replicas too, and its grant
    lets redis-py's cluster client find its way: each tenant (one per master) runs
    every operation, acknowledged (INFO granted to plan it), and gets NOPERM on the
    others. (A replica that
    holds the user serves it once promoted.)"""
    cluster = start_cluster(kind)
    admin = redis.RedisCluster.from_url(cluster.url)
    for n, tenant in enumerate(CLUSTER_TENANTS):
        acl.create_tenant_user(admin, tenant, f"pw{n}", f"user{n}", grant_info=True)
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as direct:
            assert all(direct.acl_getuser(f"user{n}") for n in range(len(CLUSTER_TENANTS)))
    for n, tenant in enumerate(CLUSTER_TENANTS):
        client = redis.RedisCluster.from_url(cluster.url, username=f"user{n}", password=f"pw{n}")
        exercise(RedisStore(client, tenant=tenant, durability="acknowledged"))
        for other in CLUSTER_TENANTS:
            if other != tenant:
                with pytest.raises(redis.exceptions.NoPermissionError):
                    RedisStore(client, tenant=other).events.buffer(ev("x", "k/1"), at=at(0))
        client.close()
    admin.close()


@pytest.mark.real
def test_the_cli_creates_the_user(start):
    """agentplane-redis acl --json creates the user and prints its credentials."""
    server = start("valkey")
    result = CliRunner().invoke(main, ["--url", server.url, "--tenant", "a*", "--json", "acl"])
    assert result.exit_code == 0, result.output
    made = json.loads(result.output)
    assert made["user"] == "agentplane-a*"
    assert "~agentplane:{a\\*}:*" in made["rules"]
    client = redis.Redis(port=server.port, username=made["user"], password=made["password"])
    assert RedisStore(client, tenant="a*").events.buffer(ev("e", "k/1"), at=at(0))
    with pytest.raises(redis.exceptions.NoPermissionError):
        RedisStore(client, tenant="acme").events.stats()
    # The user exists now: resetting it (and its password) asks first.
    again = ["--url", server.url, "--tenant", "a*", "--json", "acl", "--password", "new"]
    refused = CliRunner().invoke(main, again, input="n\n")
    assert refused.exit_code == 1
    assert RedisStore(client, tenant="a*").events.buffer(ev("e2", "k/1"), at=at(0))
    reset = CliRunner().invoke(main, [*again, "--yes"])
    assert reset.exit_code == 0, reset.output
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=server.port, username=made["user"], password=made["password"]).ping()


@pytest.mark.real
def test_the_cli_dry_run_prints_the_command_and_changes_nothing(start):
    """--dry-run prints an ACL SETUSER line for redis-cli and creates no user."""
    server = start("redis")
    command = [sys.executable, "-m", "agentplane_redis", "--url", server.url, "--tenant", "a*"]
    command += ["acl", "--user", "star", "--password", "secret", "--dry-run"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert out.startswith("ACL SETUSER star reset on '>secret' '~agentplane:{a\\*}:*'")
    assert "+waitaof" not in out  # Redis 7.0
    assert "star" not in redis.Redis(port=server.port).acl_users()


def test_a_tenant_with_a_space_cannot_have_an_exact_pattern():
    """Redis refuses spaces in key rules, and ? would match other tenants: refused."""
    with pytest.raises(InvalidInput, match="space"):
        acl.rules("sp ace", "pw", {"redis_version": "7.0.15"})
    result = CliRunner().invoke(
        main, ["--url", "redis://127.0.0.1:1/0", "--tenant", "a b", "acl", "--user", "u"]
    )
    assert result.exit_code == EXIT_REFUSED
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
