"""The store on Redis Cluster and Valkey cluster (docs/cluster.md).

The behaviour battery runs over both clusters (conftest.py); here: where the
tenants land, ``from_url``, acknowledged writes on the tenant's master, and the
drills: a master killed under load, a master killed while its replica was
stalled, and a tenant's slot moved key by key under load. The drills print
what callers saw (``pytest -s``); docs/cluster.md quotes them.

Each drill starts a cluster of its own and worker processes (10 to 20 s). The
default run takes a set of their cases that has every pair of two settings
(server kind, flavour, durability, how the slot moves) in some case; the
other cases are long runs, under ``--soak``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from click.testing import CliRunner
from cluster_load import Job, Journal, run
from redis.crc import key_slot

from agentplane_redis import AsyncRedisStore, DurabilityNotConfirmed, RedisStore
from agentplane_redis.cli import main
from agentplane_redis.embedded import Cluster, Server
from agentplane_redis.keys import TenantKeys

from conftest import CLUSTER_TENANTS, Blocking
from helpers import ev

pytestmark = pytest.mark.real
SPAWN = multiprocessing.get_context("spawn")
CLUSTERS = ("redis7-cluster", "valkey8-cluster")


def slot_of(tenant: str) -> int:
    return key_slot(TenantKeys(tenant).key("events").encode())


@pytest.fixture(params=CLUSTERS)
def cluster(request: pytest.FixtureRequest, servers: Any) -> Cluster:
    """The session's cluster of one kind (shared with the battery)."""
    if request.param not in request.config.getoption("--backends").split(","):
        pytest.skip(f"{request.param} not selected")
    started = servers.get(request.param)
    assert isinstance(started, Cluster)
    return started


def soak(*values: Any) -> Any:
    """A drill's case that runs under ``--soak`` only (the module's docstring)."""
    return pytest.param(*values, marks=pytest.mark.slow)


def test_every_master_serves_some_of_the_batterys_tenants(cluster):
    """The battery's tenants (conftest.CLUSTER_TENANTS) land on three different masters."""
    masters = cluster.masters_now()
    assert len(masters) == 3
    print(f"\n{cluster.kind} cluster, masters {[m.port for m in masters]}:")
    owners = {}
    for tenant in CLUSTER_TENANTS:
        slot = slot_of(tenant)
        owner = cluster.owner(slot)
        owners[tenant] = owner.port
        print(f"  tenant {tenant!r:8} slot {slot:5}  master :{owner.port}")
        with RedisStore.from_url(cluster.url, tenant=tenant) as store:
            assert store._driver.owner_name() == f"127.0.0.1:{owner.port}"
    assert sorted(owners.values()) == sorted(m.port for m in masters)


def test_from_url_recognises_a_cluster_from_any_node(cluster):
    """A master's or a replica's URL gives a RedisCluster, and every tenant works;
    cluster=False insists on a plain client."""
    replica = cluster.replicas_of(cluster.masters_now()[0])[0]
    for url in (cluster.url, replica.url):
        for tenant in CLUSTER_TENANTS:
            with RedisStore.from_url(url, tenant=tenant) as store:
                assert isinstance(store.client, redis.RedisCluster)
                assert store.events.buffer(ev(f"e-{url}", "k/1")) is True
    plain = RedisStore.from_url(cluster.url, cluster=False, tenant="alpha")
    assert type(plain.client) is redis.Redis
    plain.close_connection()

    async def main() -> None:
        store = await AsyncRedisStore.connect(replica.url, tenant="t1")
        assert isinstance(store.client, redis.asyncio.RedisCluster)
        assert await store.events.buffer(ev("e-async", "k/1")) is True
        await store.close_connection()

    asyncio.run(main())


def test_from_url_keeps_a_plain_client_for_a_single_server(servers, request):
    if "valkey8" not in request.config.getoption("--backends").split(","):
        pytest.skip("valkey8 not selected")
    store = RedisStore.from_url(servers.get("valkey8").url, tenant="acme")
    assert type(store.client) is redis.Redis
    store.close_connection()


def _confirmations(node: Server) -> int:
    with redis.Redis(port=node.port) as admin:
        stats = admin.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("wait", "waitaof"))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_acknowledged_writes_are_confirmed_on_the_tenants_master(cluster, flavour):
    """Each write is confirmed on the connection of the master that ran it: WAIT (or
    WAITAOF) calls rise on that master only, one per write. (A first write learns
    the tenant's live buckets, which other tests left: one answered NEED is sent
    again, and confirmed again, so the count starts after it.)"""
    masters = cluster.masters_now()
    for tenant in CLUSTER_TENANTS:
        owner = cluster.owner(slot_of(tenant))
        counted: dict[int, int] = {}

        def count() -> dict[int, int]:
            return {m.port: _confirmations(m) for m in masters}

        if flavour == "sync":
            with RedisStore.from_url(cluster.url, tenant=tenant, durability="acknowledged") as s:
                assert s.events.buffer(ev(f"{flavour}-first", "k/1")) is True
                counted = count()
                for i in range(5):
                    assert s.events.buffer(ev(f"{flavour}-{i}", "k/1")) is True
                assert s.events.stats().live >= 5  # reads send no confirmation
        else:

            async def main(tenant: str = tenant) -> dict[int, int]:
                s = await AsyncRedisStore.connect(
                    cluster.url, tenant=tenant, durability="acknowledged"
                )
                assert await s.events.buffer(ev(f"{flavour}-first", "k/1")) is True
                before = count()
                for i in range(5):
                    assert await s.events.buffer(ev(f"{flavour}-{i}", "k/1")) is True
                assert (await s.events.stats()).live >= 5
                await s.close_connection()
                return before

            counted = asyncio.run(main())
        after = count()
        grew = {port: after[port] - counted[port] for port in after}
        assert grew == {m.port: (5 if m.port == owner.port else 0) for m in masters}


def _until(what: str, ready: Any, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} did not happen in {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


def _promoted(cluster: Cluster, slot: int, old: Server) -> bool:
    try:
        return cluster.owner(slot).port != old.port
    except (LookupError, redis.RedisError, OSError):
        return False


@pytest.mark.parametrize(
    ("kind", "flavour"),
    [("redis", "async"), ("valkey", "sync"), soak("redis", "sync"), soak("valkey", "async")],
)
def test_a_master_killed_while_its_replica_stalled_loses_nothing_acknowledged(
    start_cluster, kind, flavour
):
    """durability="acknowledged": the replica is stopped (SIGSTOP), writes are refused
    (not confirmed), the master is killed, the replica resumes and is promoted; every
    write the store acknowledged is on the new master. The confirmation is planned
    again for the new master, and works once it has a replica again."""
    cluster = start_cluster(kind, extra=("--cluster-replica-validity-factor", "0"))
    tenant = "acme"
    slot = slot_of(tenant)
    master = cluster.owner(slot)
    replica = cluster.replicas_of(master)[0]
    loop = asyncio.new_event_loop()
    if flavour == "sync":
        store: Any = RedisStore.from_url(cluster.url, tenant=tenant, durability="acknowledged")
    else:
        store = Blocking(
            AsyncRedisStore.from_url(cluster.url, tenant=tenant, durability="acknowledged"), loop
        )
    acknowledged, refused = [], []

    def write(event_id: str) -> None:
        try:
            store.events.buffer(ev(event_id, "k/1"))
            acknowledged.append(event_id)
        except DurabilityNotConfirmed as error:
            refused.append(event_id)
            print(f"{event_id}: {error}")

    for i in range(50):
        write(f"before-{i}")
    assert len(acknowledged) == 50
    replica.pause()
    for i in range(2):
        write(f"stalled-{i}")
    assert refused == ["stalled-0", "stalled-1"]  # not confirmed: not acknowledged
    master.crash()
    replica.resume()
    took = _until("the replica's promotion", lambda: _promoted(cluster, slot, master))
    assert cluster.owner(slot).port == replica.port
    # The old master comes back, as a replica of the new one: writes confirm again.
    master.restart()
    cluster.wait_ok()
    for i in range(20):
        write(f"after-{i}")
    assert all(f"after-{i}" in acknowledged for i in range(20))
    assert store._driver.owner_name() == f"127.0.0.1:{replica.port}"
    with RedisStore.from_url(replica.url, tenant=tenant) as reader:
        missing = [e for e in acknowledged if reader.events.lookup("src", e) is None]
    print(
        f"\n{kind}: promoted in {took:.1f} s; {len(acknowledged)} acknowledged, "
        f"{len(refused)} refused while the replica stalled, {len(missing)} lost"
    )
    assert missing == []
    store.close_connection()
    loop.close()


def _drill(cluster: Cluster, jobs: list[Job], disturb: Any) -> dict[str, Journal]:
    """Runs the workers, lets them settle, calls ``disturb()``, stops them, reads journals."""
    ready = [SPAWN.Event() for _ in jobs]
    stop = SPAWN.Event()
    procs = [
        SPAWN.Process(target=run, args=(job, r, stop)) for job, r in zip(jobs, ready, strict=True)
    ]
    for p in procs:
        p.start()
    try:
        for r in ready:
            assert r.wait(60)
        time.sleep(1.0)
        disturb()
        time.sleep(1.5)
    finally:
        stop.set()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
    return {job.name: Journal.read(job) for job in jobs}


def _report(title: str, journals: dict[str, Journal]) -> None:
    print(f"\n{title}")
    for name, j in journals.items():
        print(
            f"  {name:24} calls {len(j.entries):5}  answers {j.outcomes}  errors {j.errors}"
            f"  longest wait {j.longest_wait():.2f} s"
        )


@pytest.fixture
def journals_dir(tmp_path: Any) -> str:
    return str(tmp_path)


@pytest.mark.parametrize(
    ("kind", "coverage"),
    [("redis", "yes"), ("valkey", "no"), soak("redis", "no"), soak("valkey", "yes")],
)
def test_a_master_killed_under_load_its_tenants_carry_on(
    start_cluster, kind, coverage, journals_dir
):
    """Workers on every master; one master is SIGKILLed. Its replica is promoted, its
    tenants wait about the node timeout and carry on: no caller sees an exception,
    and no new event is taken for a duplicate. With full coverage required (the
    default) every tenant waits while a slot has no master; without, only the dead
    master's. (How long each waited is printed, not asserted: this machine is shared.)"""
    cluster = start_cluster(kind, extra=("--cluster-require-full-coverage", coverage))
    victim_tenant = "acme"
    slot = slot_of(victim_tenant)
    master = cluster.owner(slot)
    jobs = [
        Job(
            cluster.url,
            t,
            f"{t}-{flavour}",
            flavour=flavour,
            journal=os.path.join(journals_dir, f"{t}-{flavour}.jsonl"),
        )
        for t in CLUSTER_TENANTS
        for flavour in ("sync", "async")
    ]
    promoted: list[float] = []

    def kill_master() -> None:
        master.crash()
        promoted.append(_until("promotion", lambda: _promoted(cluster, slot, master)))

    journals = _drill(cluster, jobs, kill_master)
    _report(
        f"{kind}, cluster-require-full-coverage {coverage}: master :{master.port} killed,"
        f" promoted in {promoted[0]:.1f} s",
        journals,
    )
    with RedisStore.from_url(cluster.url, tenant=victim_tenant) as reader:
        for flavour in ("sync", "async"):
            j = journals[f"{victim_tenant}-{flavour}"]
            lost = [e for e in j.acknowledged if reader.events.lookup("src", e) is None]
            print(
                f"  {victim_tenant}-{flavour}: {len(lost)} answered deliveries lost"
                " (durability='fast': the replica's lag when its master died)"
            )
    for name, j in journals.items():
        assert j.errors == {}, name
        assert set(j.outcomes) <= {"Buffered", "Resumed"}, name  # never Duplicate
        assert len(j.acknowledged) > 10, name
    if coverage == "no":  # the other masters' tenants hardly noticed (a ratio, one run)
        victim = min(journals[f"{victim_tenant}-{f}"].longest_wait() for f in ("sync", "async"))
        others = max(j.longest_wait() for n, j in journals.items() if victim_tenant not in n)
        assert others < victim / 4
    # Answers came after the failover too.
    last = max(e["t1"] for e in journals[f"{victim_tenant}-sync"].entries if "outcome" in e)
    assert last > max(e["t0"] for e in journals[f"{victim_tenant}-sync"].entries) - 1.0


#: How a drill moves the slot: (keys per MIGRATE, pause between them in s, in words).
MOVES = {"by-key": (1, 0.1, "key by key"), "at-once": (1000, 0.0, "in one MIGRATE")}


@pytest.mark.parametrize(
    ("kind", "durability", "how"),
    [
        ("redis", "fast", "by-key"),
        ("redis", "acknowledged", "at-once"),
        ("valkey", "fast", "at-once"),
        ("valkey", "acknowledged", "by-key"),
        soak("redis", "fast", "at-once"),
        soak("redis", "acknowledged", "by-key"),
        soak("valkey", "fast", "by-key"),
        soak("valkey", "acknowledged", "at-once"),
    ],
)
def test_a_tenants_slot_moved_under_load_only_slows_it(
    start_cluster, kind, durability, how, journals_dir
):
    """The tenant's slot moves to another master, one key at a time 0.1 s apart or in
    one MIGRATE (TRYAGAIN and ASK meanwhile), while workers deliver to it: no caller
    sees an exception, nothing is duplicated or lost, and afterwards the new master
    serves the tenant."""
    batch, pause, moving = MOVES[how]
    cluster = start_cluster(kind)
    tenant = "acme"
    slot = slot_of(tenant)
    source = cluster.owner(slot)
    target = next(m for m in cluster.masters_now() if m.port != source.port)
    jobs = [
        Job(
            cluster.url,
            tenant,
            f"{tenant}-{flavour}",
            durability=durability,
            flavour=flavour,
            journal=os.path.join(journals_dir, f"{flavour}.jsonl"),
        )
        for flavour in ("sync", "async")
    ]
    moved: list[tuple[int, float]] = []

    def move() -> None:
        t0 = time.monotonic()
        keys = cluster.move_slot(slot, target, pause=pause, batch=batch)
        moved.append((keys, time.monotonic() - t0))

    journals = _drill(cluster, jobs, move)
    keys, took = moved[0]
    _report(
        f"{kind} {durability}: slot {slot} moved {moving} ({keys} keys, {took:.2f} s)", journals
    )
    assert cluster.owner(slot).port == target.port
    with RedisStore.from_url(target.url, tenant=tenant) as reader:
        for name, j in journals.items():
            assert j.errors == {}, name
            assert set(j.outcomes) <= {"Buffered", "Resumed"}, name
            assert len(j.acknowledged) > 10, name
            missing = [e for e in j.acknowledged if reader.events.lookup("src", e) is None]
            assert missing == [], name


def test_the_cli_works_on_a_cluster(cluster):
    """check names the tenant's master; tenants finds the tenants of every master."""
    for tenant in CLUSTER_TENANTS:
        with RedisStore.from_url(cluster.url, tenant=tenant) as store:
            store.runs.seal("r")
    for tenant in CLUSTER_TENANTS:
        result = CliRunner().invoke(
            main, ["--url", cluster.url, "--tenant", tenant, "--json", "check"]
        )
        assert result.exit_code == 0, result.output
        found = json.loads(result.output)
        assert found["node"] == f"127.0.0.1:{cluster.owner(slot_of(tenant)).port}"
        assert found["online_replicas"] == 1
    result = CliRunner().invoke(main, ["--url", cluster.url, "--json", "tenants"])
    assert result.exit_code == 0, result.output
    assert set(CLUSTER_TENANTS) <= set(json.loads(result.output))
