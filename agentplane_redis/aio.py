"""AsyncRedisStore: the same surface as RedisStore, every method awaited."""

from __future__ import annotations

import logging
from typing import Any

import redis

from .drivers import AsyncDriver, ServerCheck
from .store import AsyncEvents, AsyncRuns, AsyncTimers, StoreBase, client_for_url

log = logging.getLogger("agentplane_redis")


class AsyncRedisStore(StoreBase[AsyncDriver, AsyncEvents, AsyncTimers, AsyncRuns]):
    """The event, timer and run stores of one tenant, over a ``redis.asyncio`` client.

    Options as for ``RedisStore``. A constructor cannot await, so the server
    check (eviction policy; how acknowledged writes are confirmed) runs before the
    first call; ``await AsyncRedisStore.connect(...)`` runs it before returning,
    so a server that cannot serve the store is refused at start-up.
    """

    _driver_class = AsyncDriver
    _part_classes = (AsyncEvents, AsyncTimers, AsyncRuns)

    @classmethod
    async def connect(cls, client: Any, **options: Any) -> AsyncRedisStore:
        """A checked store over a ``redis.asyncio`` client or a URL: raises
        ``ServerMisconfigured`` or ``DurabilityNotConfirmed`` before returning."""
        store = (
            cls.from_url(client, **options) if isinstance(client, str) else cls(client, **options)
        )
        await store._driver.check(again=False)
        return store

    async def check(self) -> ServerCheck:
        """Reads the server's INFO and checks it (see ``RedisStore.check``)."""
        return await self._driver.check()

    @classmethod
    def from_url(cls, url: str, *, cluster: bool | None = None, **options: Any) -> AsyncRedisStore:
        """A store over a ``redis.asyncio`` client for ``url`` with timeouts and
        retries (``client_options``): ``RedisCluster`` or ``Redis`` as for
        ``RedisStore.from_url``, whose one ``INFO cluster`` question blocks
        (``cluster=True`` or ``False`` skips it)."""
        return cls(client_for_url(url, cluster, asyncio=True), **options)

    async def close_connection(self) -> None:
        """Acknowledge the replies of the calls this store received (so the server
        forgets them; best effort), then close the client's connections (and the
        store's own, on a cluster)."""
        try:
            await self._driver.acknowledge()
        except redis.exceptions.RedisError as error:
            log.debug("replies not acknowledged on close: %s", error)
        await self._driver.close()
        await self._driver.client.aclose()

    async def __aenter__(self) -> AsyncRedisStore:
        await self.check()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_connection()
