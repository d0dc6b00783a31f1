"""One peer's side of the drain benchmark, run with the peers' own venv.

    python drain.py fill <arq|saq|bullmq> <url> <jobs>
    python drain.py work <arq|saq|bullmq> <url> <jobs>

``fill`` enqueues ``jobs`` jobs that are due now; ``work`` runs one worker
process of the peer until its queue is drained, then exits. The job does
nothing, so the figures are the queue's own cost.
"""

# ruff: noqa: PLC0415  (each peer imports only its own package: one venv holds them)
from __future__ import annotations

import asyncio
import sys

QUEUE = "drain"
GO = "drain:go"


def wait_for_go(url: str) -> None:
    """Started and imported: wait for the benchmark's go, so that start-up is not timed."""
    import time

    import redis

    client = redis.Redis.from_url(url)
    while not client.exists(GO):
        time.sleep(0.002)
    client.close()


async def noop(*args: object, **kwargs: object) -> None:
    return None


async def fill_arq(url: str, jobs: int) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    pool = await create_pool(RedisSettings.from_dsn(url))
    for start in range(0, jobs, 1000):
        await asyncio.gather(
            *(pool.enqueue_job("noop", i) for i in range(start, min(jobs, start + 1000)))
        )
    await pool.aclose()


def work_arq(url: str) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    worker = Worker(
        functions=[func(noop, name="noop")],
        redis_settings=RedisSettings.from_dsn(url),
        burst=True,
        poll_delay=0.01,
        max_jobs=10,
        keep_result=0,
        handle_signals=False,
    )
    worker.run()


async def fill_saq(url: str, jobs: int) -> None:
    from saq import Queue

    queue = Queue.from_url(url, name=QUEUE)
    for start in range(0, jobs, 1000):
        await asyncio.gather(
            *(queue.enqueue("noop", n=i) for i in range(start, min(jobs, start + 1000)))
        )
    await queue.disconnect()


async def work_saq(url: str) -> None:
    from saq import Queue, Worker

    queue = Queue.from_url(url, name=QUEUE)
    worker = Worker(
        queue, functions=[("noop", noop)], concurrency=10, burst=True, dequeue_timeout=0.1
    )
    await worker.start()
    await queue.disconnect()


async def fill_bullmq(url: str, jobs: int) -> None:
    from bullmq import Queue

    queue = Queue(QUEUE, {"connection": url})
    for start in range(0, jobs, 1000):
        await queue.addBulk(
            [{"name": "noop", "data": {"n": i}} for i in range(start, min(jobs, start + 1000))]
        )
    await queue.close()


async def work_bullmq(url: str) -> None:
    from bullmq import Queue, Worker

    async def process(job: object, token: str) -> None:
        return None

    queue = Queue(QUEUE, {"connection": url})
    worker = Worker(QUEUE, process, {"connection": url, "concurrency": 10})
    while True:
        await asyncio.sleep(0.05)
        counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized")
        if not any(counts.values()):
            break
    await worker.close()
    await queue.close()


def main() -> None:
    what, peer, url, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if what == "fill":
        asyncio.run({"arq": fill_arq, "saq": fill_saq, "bullmq": fill_bullmq}[peer](url, jobs))
    elif peer == "arq":
        wait_for_go(url)
        work_arq(url)
    else:
        wait_for_go(url)
        asyncio.run({"saq": work_saq, "bullmq": work_bullmq}[peer](url))


if __name__ == "__main__":
    main()
