"""AsyncRedisStore: the same surface as RedisStore, every method awaited."""

from __future__ import annotations

from typing import Any

import redis.asyncio

from . import ops
from .drivers import AsyncDriver
from .keys import TenantKeys
from .store import AsyncEvents, AsyncRuns, AsyncTimers, store_context


class AsyncRedisStore:
    """The event, timer and run stores of one tenant, over a ``redis.asyncio`` client.

    With ``durability="acknowledged"`` the server's means of confirmation is
    probed on the first write (a constructor cannot await).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | Any,
        *,
        tenant: str = "default",
        clock: str = "server",
        timer_lease: object = None,
        max_payload_bytes: int = ops.DEFAULT_MAX_PAYLOAD,
        durability: str = "fast",
    ) -> None:
        ctx, mode = store_context(tenant, clock, timer_lease, max_payload_bytes, durability)
        self._driver = AsyncDriver(client, ctx, mode)
        self.events = AsyncEvents(self._driver)
        self.timers = AsyncTimers(self._driver)
        self.runs = AsyncRuns(self._driver)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisStore:
        """A store over ``redis.asyncio.Redis.from_url(url)``."""
        return cls(redis.asyncio.Redis.from_url(url), **options)

    @property
    def tenant(self) -> str:
        return self._driver.ctx.keys.tenant

    @property
    def keys(self) -> TenantKeys:
        return self._driver.ctx.keys

    @property
    def client(self) -> Any:
        return self._driver.client

    async def close_connection(self) -> None:
        """Close the client's connections."""
        await self._driver.client.aclose()

    def __repr__(self) -> str:
        return f"AsyncRedisStore(tenant={self.tenant!r})"
