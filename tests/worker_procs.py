"""Worker processes for the worker tests: each runs a real Worker on its own connection
and appends what its handler did to a log file."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentplane_redis import RedisStore
from agentplane_redis.worker import Worker


def _log(path: str, **entry: Any) -> None:
    with Path(path).open("a") as f:
        f.write(json.dumps(entry) + "\n")


def run_worker(
    url: str,
    tenants: list[str],
    name: str,
    log: str,
    lease_ms: int,
    slow: str | None = None,
    handler_s: float = 0.0,
    poll_interval: float = 0.05,
    heartbeat_interval: float = 10.0,
) -> None:
    """A worker over the tenants; its handler logs each timer (start, end, pid). The timer
    whose effect is ``slow`` takes an hour, so the test can kill it mid-handler."""
    stores = [RedisStore.from_url(url, tenant=t) for t in tenants]

    def on_timer(store: Any, timer: Any) -> None:
        entry = {"worker": name, "pid": os.getpid(), "tenant": store.tenant}
        entry.update(run=timer.run, effect=timer.effect, at=time.time())
        _log(log, event="start", **entry)
        time.sleep(3600 if timer.effect == slow else handler_s)
        _log(log, event="done", end=time.time(), **entry)

    worker = Worker(
        stores,
        on_timer=on_timer,
        lease=timedelta(milliseconds=lease_ms),
        batch=8,
        poll_interval=poll_interval,
        heartbeat_interval=heartbeat_interval,
        max_backoff=0.5,
    )
    worker.run()
    _log(log, event="exit", worker=name, pid=os.getpid())
