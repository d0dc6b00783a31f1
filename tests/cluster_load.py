"""Load for the cluster drills: worker processes that deliver brand-new events.

Each worker serves one tenant through its own store (sync or async, "fast" or
"acknowledged") and delivers new events until told to stop, timing every call
and noting its outcome. A new event can only answer ``Buffered`` (or
``Resumed``); ``Duplicate`` would mean a call replayed by a client was taken
for a second one. The parent reads the journals: what callers saw, how long
each tenant went without an answer, and which events were acknowledged.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

from agentplane_redis import AsyncRedisStore, RedisStore

from helpers import ev


@dataclass(frozen=True)
class Job:
    url: str
    tenant: str
    name: str
    durability: str = "fast"
    flavour: str = "sync"
    journal: str = ""


def _entry(t0: float, t1: float, event_id: str, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, BaseException):
        return {
            "t0": t0,
            "t1": t1,
            "id": event_id,
            "error": type(outcome).__name__,
            "message": str(outcome)[:200],
        }
    return {"t0": t0, "t1": t1, "id": event_id, "outcome": type(outcome).__name__}


def run(job: Job, ready: Any, stop: Any) -> None:
    """Delivers events ``<name>-0``, ``<name>-1``, ... until ``stop`` is set; writes one
    JSON line per call to the journal."""
    if job.flavour == "async":
        asyncio.run(_run_async(job, ready, stop))
        return
    store = RedisStore.from_url(job.url, tenant=job.tenant, durability=job.durability)
    entries: list[dict[str, Any]] = []
    ready.set()
    n = 0
    while not stop.is_set():
        event_id = f"{job.name}-{n}"
        t0 = time.time()
        try:
            outcome: Any = store.events.deliver(ev(event_id, "k/1"))
        except Exception as error:  # every failure is what the drill measures
            outcome = error
        entries.append(_entry(t0, time.time(), event_id, outcome))
        n += 1
    _write(job.journal, entries)


async def _run_async(job: Job, ready: Any, stop: Any) -> None:
    store = await AsyncRedisStore.connect(job.url, tenant=job.tenant, durability=job.durability)
    entries: list[dict[str, Any]] = []
    ready.set()
    n = 0
    while not stop.is_set():
        event_id = f"{job.name}-{n}"
        t0 = time.time()
        try:
            outcome: Any = await store.events.deliver(ev(event_id, "k/1"))
        except Exception as error:
            outcome = error
        entries.append(_entry(t0, time.time(), event_id, outcome))
        n += 1
    await store.close_connection()
    _write(job.journal, entries)


def _write(path: str, entries: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")


@dataclass
class Journal:
    """What one worker saw."""

    job: Job
    entries: list[dict[str, Any]]

    @classmethod
    def read(cls, job: Job) -> Journal:
        with open(job.journal) as f:
            return cls(job, [json.loads(line) for line in f if line.strip()])

    @property
    def acknowledged(self) -> list[str]:
        """Events whose delivery answered (stored, as far as the caller knows)."""
        return [e["id"] for e in self.entries if "outcome" in e]

    @property
    def errors(self) -> dict[str, int]:
        seen: dict[str, int] = {}
        for e in self.entries:
            if "error" in e:
                seen[e["error"]] = seen.get(e["error"], 0) + 1
        return seen

    @property
    def outcomes(self) -> dict[str, int]:
        seen: dict[str, int] = {}
        for e in self.entries:
            if "outcome" in e:
                seen[e["outcome"]] = seen.get(e["outcome"], 0) + 1
        return seen

    def longest_wait(self) -> float:
        """The longest time between two answers (or from a call's start to its answer):
        how long this tenant was unavailable, in seconds."""
        answered = sorted(e["t1"] for e in self.entries if "outcome" in e)
        starts = [self.entries[0]["t0"]] if self.entries else []
        times = starts + answered
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def slowest_call(self) -> float:
        return max((e["t1"] - e["t0"] for e in self.entries), default=0.0)
