"""The server's work per operation as instructions: a figure the machine's load does not move.

    python benchmarks/instructions.py [--server valkey|redis] [--rows 2000] [--calls 256]

Starts a throwaway server under Valgrind's callgrind (``apt-get install
valgrind``), fills a tenant with ``--rows`` rows per structure (so that every
structure is past its compact encoding, as at a tenant's usual size), and
counts the instructions the server executes for ``--calls`` calls of each
operation of an event's and a timer's life cycle, next to a trivial script
(``return 1`` by ``EVALSHA``) counted the same way: each operation's count per
call and its multiple of the trivial script's. The count covers everything the
server does for a call (reading the request, the script, its commands, the
reply), and nothing the client does.

Server time on a shared machine moves by a third from one run to the next;
the counts repeat to within about 1 %, so two versions of the code compare in
one run each::

    PYTHONPATH=/path/to/other/checkout python benchmarks/instructions.py

What the count leaves out is the time an instruction waits for memory, which
grows with the data (``flatness.py`` measures that) and varies by machine.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from floor import SKETCH, fill_sketch, sketch_lives
from targets import TRIVIAL, at, event, fill, server_version, wait

from agentplane_redis import RedisStore, Timer
from agentplane_redis.embedded import Server
from agentplane_redis.keys import TenantKeys
from agentplane_redis.scripts import catalogue, library

#: The targets, as multiples of the trivial script (issue "Performance").
TARGETS = {"event life": 15, "timer life": 6}


class Counted(Server):
    """A server run under callgrind, whose instruction count is zeroed and read on demand."""

    def args(self) -> list[str]:
        out = str(Path(self.folder, "callgrind.%p"))
        tool = ["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={out}"]
        return [*tool, *super().args()]

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.pid)], capture_output=True, check=True)

    def count(self, batch: Callable[[], Any]) -> int:
        """Instructions the server executes while ``batch`` runs."""
        self._control("-z")
        batch()
        dumped = set(Path(self.folder).glob("callgrind.*"))
        self._control("-d")
        new = set(Path(self.folder).glob("callgrind.*")) - dumped
        latest = max(new, key=lambda p: p.stat().st_mtime_ns)
        found = re.search(r"^summary:\s*(\d+)", latest.read_text(errors="replace"), re.M)
        latest.unlink()
        if found is None:
            raise RuntimeError(f"no instruction count in {latest}")
        return int(found.group(1))


def write_parts(server: Counted, client: redis.Redis, n: int) -> dict[str, float]:
    """What every writing call costs before its own work, on ``arm``'s 6 keys and 8
    arguments, through functions appended to a copy of the library: an empty
    function; entering the operation's function as the library does (keys bound by
    role); and that plus checking the call token and remembering
    a one-element reply. Tokens are acknowledged eight at a time, as a store does."""
    lib = library()
    roles = catalogue()["arm"].roles
    bind = ", ".join(f"{role} = keys[{i}]" for i, role in enumerate(roles, 1))
    source = lib.source.replace(f"#!lua name={lib.name}", "#!lua name=agentplane_parts", 1)
    source = source.replace(f"agentplane_{lib.version}_", "agentplane_parts_")
    bound = f"function(keys) return {{ {bind} }} end"
    source += f"""
redis.register_function("part_empty", function() return 1 end)
redis.register_function("part_entered", entry(function() return {{ "NEW" }} end, {bound}, true))
redis.register_function("part_remembered",
  entry(function() return guard(function() return {{ "NEW" }} end) end, {bound}, true))
"""
    client.function_load(source, replace=True)
    keys = [TenantKeys("parts").key(role) for role in roles]

    def calls(function: str) -> Callable[[], Any]:
        def run() -> None:
            received: list[str] = []
            for i in range(n):
                token = f"{1797000000000 + i:013d}{i:016x}"
                acks = ",".join(received) if len(received) >= 8 else ""
                if acks:
                    received = []
                args = ("run", f"t-{i}", "1767225600000", "0", "forward", "", token, acks)
                client.fcall(function, len(keys), *keys, *args)
                received.append(token)

        return run

    out = {
        "an empty function, with arm's 6 keys and 8 arguments": calls("part_empty"),
        "entering arm's function (keys bound by role)": calls("part_entered"),
        "the same, with the call token checked and the reply remembered": calls("part_remembered"),
    }
    found = {name: server.count(batch) / n for name, batch in out.items()}
    client.function_delete("agentplane_parts")
    return found


def counts(server: Counted, client: redis.Redis, store: RedisStore, n: int) -> dict[str, float]:
    """Instructions per call of each operation, and per life cycle."""
    trivial = client.script_load(TRIVIAL)
    base = 3 * 10**6  # runs, events and timers of their own
    for i in range(n):
        store.events.subscribe(wait(base + i), at=at(i))

    def each(call: Callable[[int], Any]) -> Callable[[], Any]:
        return lambda: [call(i) for i in range(n)]

    def arm(prefix: str) -> Callable[[int], Any]:
        return lambda i: store.timers.arm(Timer(f"c-{i % 50}", f"{prefix}-{i}", at(i)))

    def claim_all() -> None:
        while store.timers.claim_due(now=at(n), limit=128):
            pass

    def complete_pages() -> None:
        while page := store.timers.claim_due(now=at(n), limit=128):
            store.timers.disarm_many(page)

    batches: dict[str, Callable[[], Any]] = {
        "trivial script": each(lambda i: client.evalsha(trivial, 0)),
        "deliver": each(lambda i: store.events.deliver(event(base + i), at=at(i))),
        "claim_for": each(lambda i: store.events.claim_for(wait(base + i), at=at(i))),
        "unsubscribe": each(lambda i: store.events.unsubscribe(f"run-{base + i}", "await-payment")),
        "buffer": each(lambda i: store.events.buffer(event(base + n + i), at=at(i))),
        "subscribe": each(lambda i: store.events.subscribe(wait(base + n + i), at=at(i))),
        "arm": each(arm("t")),
        "claim_due, per timer (pages of 128)": claim_all,
        "disarm": each(lambda i: store.timers.disarm(f"c-{i % 50}", f"t-{i}")),
    }
    out = {name: server.count(batch) / n for name, batch in batches.items()}
    out.update(write_parts(server, client, n))
    each(arm("m"))()
    out["claim_due and disarm_many, per timer"] = server.count(complete_pages) / n
    out["event life"] = out["deliver"] + out["claim_for"] + out["unsubscribe"]
    out["timer life"] = out["arm"] + out["claim_due, per timer (pages of 128)"] + out["disarm"]
    out["timer life, completed by disarm_many"] = (
        out["arm"] + out["claim_due and disarm_many, per timer"]
    )
    return out


def sketch_counts(server: Counted, client: redis.Redis, n: int, rows: int) -> dict[str, float]:
    """The same life cycles through ``floor.py``'s sketches (the fewest commands on a
    layout chosen for few commands, checking nothing), with call tokens."""

    def per_call(_: redis.Redis, batch: Callable[[], Any]) -> tuple[float, int]:
        client.config_resetstat()
        total = server.count(batch)
        calls = int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
        return total / max(1, calls), calls

    client.function_load(SKETCH, replace=True)
    fill_sketch(client, rows)
    lives = sketch_lives(client, n, 10**6, tokens=True, mean_fcall=per_call)
    return {f"sketch: {name}": count for name, count in lives.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=256)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not on PATH (apt-get install valgrind)")
    with Counted(args.server) as server:
        client = redis.Redis.from_url(server.url)
        # Calls run some fifty times slower under callgrind: none is logged as slow.
        client.config_set("slowlog-log-slower-than", -1)
        version = server_version(client)
        print(
            f"{args.server} {version} under callgrind; {args.rows:,} rows per structure,"
            f" {args.calls:,} calls per operation\n"
        )
        store = RedisStore(client, tenant="bench")
        fill(store, args.rows)
        found = counts(server, client, store, args.calls)
        found.update(sketch_counts(server, client, args.calls, args.rows))
        trivial = found["trivial script"]
        print(
            "| server instructions per call | instructions | times the trivial script"
            " | target |\n|---|---:|---:|---:|"
        )
        for name, count in found.items():
            life = name.removeprefix("sketch: ")
            target = f"{TARGETS[life]} times" if life in TARGETS else ""
            print(f"| {name} | {count:,.0f} | {count / trivial:.1f} | {target} |")


if __name__ == "__main__":
    main()
