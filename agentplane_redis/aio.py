"""AsyncRedisStore: the same surface as RedisStore, every method awaited."""

from __future__ import annotations

from typing import Any

import redis.asyncio

from .drivers import AsyncDriver
from .store import AsyncEvents, AsyncRuns, AsyncTimers, StoreBase


class AsyncRedisStore(StoreBase[AsyncDriver, AsyncEvents, AsyncTimers, AsyncRuns]):
    """The event, timer and run stores of one tenant, over a ``redis.asyncio`` client.

    Options as for ``RedisStore``. With ``durability="acknowledged"`` the
    server's means of confirmation is probed on the first write (a constructor
    cannot await).
    """

    _driver_class = AsyncDriver
    _part_classes = (AsyncEvents, AsyncTimers, AsyncRuns)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisStore:
        """A store over ``redis.asyncio.Redis.from_url(url)``."""
        return cls(redis.asyncio.Redis.from_url(url), **options)

    async def close_connection(self) -> None:
        """Close the client's connections."""
        await self._driver.client.aclose()
