"""Help for testing code that uses agentplane-redis, with no server.

``fake_store()`` is a RedisStore over fakeredis with real Lua (lupa), so every
script runs unchanged. Install with ``pip install 'agentplane-redis[fake]'``.

In pytest, ``pytest_plugins = ["agentplane_redis.testing"]`` provides the
fixtures ``agentplane_store`` and ``agentplane_async_store``, each a fresh,
empty store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from .aio import AsyncRedisStore
from .store import RedisStore


def _fakeredis() -> Any:
    try:
        import fakeredis  # noqa: PLC0415 - optional extra, needed only here
        import lupa  # noqa: F401, PLC0415 - fakeredis runs scripts through lupa
    except ImportError:
        raise ImportError(
            "agentplane_redis.testing needs fakeredis and lupa:"
            " pip install 'agentplane-redis[fake]'"
        ) from None
    return fakeredis


def fake_server() -> Any:
    """A fresh, empty fakeredis server; clients built on it share its data."""
    return _fakeredis().FakeServer()


def fake_store(tenant: str = "default", *, server: Any = None, **options: Any) -> RedisStore:
    """A RedisStore over fakeredis (a fresh server unless one is given)."""
    fakeredis = _fakeredis()
    client = fakeredis.FakeRedis(server=server or fakeredis.FakeServer())
    return RedisStore(client, tenant=tenant, **options)


def fake_async_store(
    tenant: str = "default", *, server: Any = None, **options: Any
) -> AsyncRedisStore:
    """An AsyncRedisStore over fakeredis (a fresh server unless one is given)."""
    fakeredis = _fakeredis()
    client = fakeredis.FakeAsyncRedis(server=server or fakeredis.FakeServer())
    return AsyncRedisStore(client, tenant=tenant, **options)


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is optional
    pass
else:
    try:  # pytest-asyncio's own decorator works in its strict and auto modes alike
        from pytest_asyncio import fixture as _async_fixture
    except ImportError:  # pragma: no cover - then async tests need another plugin
        _async_fixture = pytest.fixture  # type: ignore[assignment] # same call shape

    @pytest.fixture
    def agentplane_store() -> Iterator[RedisStore]:
        """A fresh RedisStore over fakeredis."""
        store = fake_store()
        yield store
        store.close_connection()

    @_async_fixture
    async def agentplane_async_store() -> AsyncIterator[AsyncRedisStore]:
        """A fresh AsyncRedisStore over fakeredis."""
        store = fake_async_store()
        yield store
        await store.close_connection()
