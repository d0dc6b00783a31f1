"""The server's work per operation as instructions: a figure the machine's load does not move.

    python benchmarks/instructions.py [--server valkey|redis] [--rows 2000] [--calls 256]

Starts a throwaway server under Valgrind's callgrind (``apt-get install
valgrind``), fills a tenant with ``--rows`` rows per structure (so that every
structure is past its compact encoding, as at a tenant's usual size), and
counts the instructions the server executes for ``--calls`` calls of each
operation of an event's and a timer's life cycle, and of the operations on a
whole run (``unsubscribe_run``, ``seal``, ``close``, ``disarm_run``), next to a trivial script
(``return 1`` by ``EVALSHA``) counted the same way: each operation's count per
call and its multiple of the trivial script's. The count covers everything the
server does for a call (reading the request, the script, its commands, the
reply), and nothing the client does.

Beside the library, the same event lives run through ``lean.py``'s lean
functions (the library's commands on its layout, with the least Lua their path
needs; and again with the fewest commands that path can take, and with those
and the strings from the client) and through
``floor.py``'s sketches (as many commands, checking
nothing), on their tenant-wide layout and again on the compact one.

Server time on a shared machine moves by a third from one run to the next;
the counts repeat to within about 1 %, so two versions of the code compare in
one run each::

    PYTHONPATH=/path/to/other/checkout python benchmarks/instructions.py

What the count leaves out is the time an instruction waits for memory, which
grows with the data (``flatness.py`` measures that) and varies by machine.

``--split buffer`` (any operation of the table, or of ``targets.py``'s single
operations, or ``lean deliver``, ``lean claim_for``, ``lean unsubscribe``)
prints instead where that operation's instructions go, by the server's own
functions: reading the request and writing the reply, entering the function,
the commands it calls through ``redis.call`` and the commands' own share of
them, Lua's garbage collector, and the rest of its Lua. That needs a server
binary with its symbols, as the embedded Valkey's has (Debian's redis-server
is stripped)::

    python benchmarks/instructions.py --split buffer

``--stages`` prints instead what the first call of a delivery from another
store costs up to each step of ``deliver``'s usual path, where that store does
not read the election first (before its first delivery met a wait): the
store's call is sent to copies of the library, each stopped (refused, nothing
written) at a later step, and the last one is the library itself, which
answers ``NEED``.

    python benchmarks/instructions.py --stages
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis
from floor import (
    SKETCH,
    compact_keys,
    event_sketch_lives,
    fill_compact,
    fill_sketch,
    sketch_lives,
)
from lean import LEAN, LeanTimers, lean_life, subscribed, timer_lives
from targets import TRIVIAL, at, event, fill, server_version, single_operations, wait

from agentplane_redis import RedisStore, Timer
from agentplane_redis.drivers import FIRST_SEND
from agentplane_redis.embedded import Server
from agentplane_redis.keys import TenantKeys
from agentplane_redis.scripts import catalogue, key_binding, library

#: The targets, as multiples of the trivial script (docs/performance.md, "Where it stands").
TARGETS = {"event life": 30, "timer life": 15, "timer life, completed by disarm_many": 10}


class Counted(Server):
    """A server run under callgrind, whose instruction count is zeroed and read on demand."""

    def args(self) -> list[str]:
        out = str(Path(self.folder, "callgrind.%p"))
        tool = ["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={out}"]
        return [*tool, *super().args()]

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.pid)], capture_output=True, check=True)

    def dump(self, batch: Callable[[], Any]) -> Path:
        """The callgrind profile of what the server executes while ``batch`` runs."""
        self._control("-z")
        batch()
        dumped = set(Path(self.folder).glob("callgrind.*"))
        self._control("-d")
        new = set(Path(self.folder).glob("callgrind.*")) - dumped
        return max(new, key=lambda p: p.stat().st_mtime_ns)

    def count(self, batch: Callable[[], Any]) -> int:
        """Instructions the server executes while ``batch`` runs."""
        latest = self.dump(batch)
        total = summary(latest)
        latest.unlink()
        return total


def summary(profile: Path) -> int:
    """The instructions a callgrind profile counts in all."""
    found = re.search(r"^summary:\s*(\d+)", profile.read_text(errors="replace"), re.M)
    if found is None:
        raise RuntimeError(f"no instruction count in {profile}")
    return int(found.group(1))


#: The server functions a split reads, each with everything it calls.
SPLIT_FUNCTIONS = (
    "fcallCommand",
    "lua_pcall",
    "luaRedisCallCommand",
    "scriptCall",
    "luaC_step",
)


def inclusive(profile: Path) -> dict[str, int]:
    """Each function's instructions with those of everything it calls, from
    ``callgrind_annotate``, by its bare name (a function recursing into itself is
    listed again with a suffix, which is left out: its outer entry holds it all)."""
    done = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile)],
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, int] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"^\s*([\d,]+)\s+\([^)]*\)\s+\S*?:?([A-Za-z_][\w.]*)(?: |$)", line)
        if found is None:
            continue
        name = found.group(2).split(".", 1)[0]
        out.setdefault(name, int(found.group(1).replace(",", "")))
    return out


def split_rows(total: int, calls: int, found: dict[str, int]) -> list[str]:
    """The split table of one operation, from ``inclusive``'s figures."""
    # A short run may end before Lua's collector takes a step: it then counts none.
    if "lua_pcall" in found:
        found.setdefault("luaC_step", 0)
    missing = [name for name in SPLIT_FUNCTIONS if name not in found]
    if missing:
        raise SystemExit(
            "the server binary has no symbols for " + ", ".join(missing) + " (try --server valkey)"
        )
    lua = found["lua_pcall"]
    parts = {
        "reading the request and writing the reply, outside FCALL": total - found["fcallCommand"],
        "FCALL finding the function, its keys and arguments made Lua values": (
            found["fcallCommand"] - lua
        ),
        "redis.call: the commands, their arguments and replies": found["luaRedisCallCommand"],
        "of which the commands themselves (scriptCall)": found["scriptCall"],
        "Lua's garbage collector": found["luaC_step"],
        "the rest of the Lua": lua - found["luaRedisCallCommand"] - found["luaC_step"],
    }
    rows = ["| part of a call, inclusive | instructions per call | share |", "|---|---:|---:|"]
    for name, count in parts.items():
        rows.append(f"| {name} | {count / calls:,.0f} | {100 * count / total:.0f} % |")
    rows.append(f"| the whole call | {total / calls:,.0f} | 100 % |")
    return rows


def write_parts(server: Counted, client: redis.Redis, n: int) -> dict[str, float]:
    """What every writing call costs before its own work, on ``arm``'s 6 keys and 8
    arguments, through functions appended to a copy of the library: an empty
    function; entering the operation's function as the library does (keys bound by
    role); and that plus the call token: a first send, as a store sends a call
    (no remembered reply looked up), remembering its one-element reply in the
    store's lane, which its next call's reply replaces."""
    lib = library()
    roles = catalogue()["arm"].roles
    source = lib.source.replace(f"#!lua name={lib.name}", "#!lua name=agentplane_parts", 1)
    source = source.replace(f"agentplane_{lib.version}_", "agentplane_parts_")
    bound = key_binding(roles)
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
            for i in range(n):
                args = ("run", f"t-{i}", "1767225600000", "0", "forward", "", "0123456789abcdef")
                client.fcall(function, len(keys), *keys, *args, f"{FIRST_SEND}{i + 1}")

        return run

    out = {
        "an empty function, with arm's 6 keys and 8 arguments": calls("part_empty"),
        "entering arm's function (keys bound by role)": calls("part_entered"),
        "the same, with the call token (a first send) and the reply remembered": calls(
            "part_remembered"
        ),
    }
    found = {name: server.count(batch) / n for name, batch in out.items()}
    client.function_delete("agentplane_parts")
    return found


def operations(client: redis.Redis, store: RedisStore, n: int) -> dict[str, Callable[[], Any]]:
    """``n`` calls of each operation, as batches to run in their order (each life
    cycle's later steps act on what the earlier ones left)."""
    trivial = client.script_load(TRIVIAL)
    base = 3 * 10**6  # runs, events and timers of their own
    for i in range(n):
        store.events.subscribe(wait(base + i), at=at(i))
        store.events.buffer(event(base + 2 * n + i), at=at(i))  # each a wait will find
        store.events.subscribe(wait(base + 4 * n + i), at=at(i))  # each will get nothing
        store.events.subscribe(wait(base + 5 * n + i), at=at(i))  # each another store resumes
    # A store of its own, as an ingress process has: it registered none of the
    # waits, so its delivery cannot name the winner's wait bucket. Its first
    # delivery to a wait is answered NEED and sent again; from then on each reads
    # the election's first waits (election_heads) and names their buckets. Two
    # deliveries first: one that learns the tenant's geometries, one that meets
    # a wait.
    ingress = RedisStore(client, tenant=store.tenant)
    ingress.events.deliver(event(base + 6 * n), at=at(0))
    store.events.subscribe(wait(base + 6 * n + 2), at=at(0))
    ingress.events.deliver(event(base + 6 * n + 2), at=at(0))

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

    return {
        "trivial script": each(lambda i: client.evalsha(trivial, 0)),
        "deliver": each(lambda i: store.events.deliver(event(base + i), at=at(i))),
        "deliver from another store (it names no wait bucket: it reads the election first)": each(
            lambda i: ingress.events.deliver(event(base + 5 * n + i), at=at(i))
        ),
        "claim_for": each(lambda i: store.events.claim_for(wait(base + i), at=at(i))),
        "unsubscribe": each(lambda i: store.events.unsubscribe(f"run-{base + i}", "await-payment")),
        "buffer": each(lambda i: store.events.buffer(event(base + n + i), at=at(i))),
        "subscribe": each(lambda i: store.events.subscribe(wait(base + n + i), at=at(i))),
        "wait (a new wait that finds its event)": each(
            lambda i: store.events.wait(wait(base + 2 * n + i), at=at(i))
        ),
        "park_wait (a new wait)": each(
            lambda i: store.events.park_wait(wait(base + 3 * n + i), at=at(i))
        ),
        "unsubscribe (a wait that got nothing)": each(
            lambda i: store.events.unsubscribe(f"run-{base + 4 * n + i}", "await-payment")
        ),
        "arm": each(arm("t")),
        "claim_due, per timer (pages of 128)": claim_all,
        "disarm": each(lambda i: store.timers.disarm(f"c-{i % 50}", f"t-{i}")),
        "arm, for the pages": each(arm("m")),
        "claim_due and disarm_many, per timer": complete_pages,
    }


#: The operations on a whole run, counted as ``targets.py`` prepares them.
RUN_OPERATIONS = (
    "unsubscribe_run (one wait)",
    "seal",
    "close (a wait and a timer)",
    "disarm_run (one timer)",
)


def counts(server: Counted, client: redis.Redis, store: RedisStore, n: int) -> dict[str, float]:
    """Instructions per call of each operation, per life cycle, and of the
    operations on a whole run."""
    out: dict[str, float] = {}
    for name, batch in operations(client, store, n).items():
        if name == "arm, for the pages":
            out.update(write_parts(server, client, n))
            batch()
        else:
            out[name] = server.count(batch) / n
    singles = single_operations(store, n)
    for name in RUN_OPERATIONS:
        prepare, op = singles[name]
        for i in range(n if prepare else 0):
            prepare(i)  # type: ignore[misc]
        out[name] = server.count(lambda op=op: [op(i) for i in range(n)]) / n
    out["event life"] = out["deliver"] + out["claim_for"] + out["unsubscribe"]
    out["timer life"] = out["arm"] + out["claim_due, per timer (pages of 128)"] + out["disarm"]
    out["timer life, completed by disarm_many"] = (
        out["arm"] + out["claim_due and disarm_many, per timer"]
    )
    return out


def split(server: Counted, client: redis.Redis, store: RedisStore, n: int, op: str) -> list[str]:
    """Where ``op``'s instructions go (``split_rows``), the operations before it in
    its life cycle run first, as ``counts`` runs them; ``lean deliver`` (and
    ``lean claim_for``, ``lean unsubscribe``) splits a step of ``lean.py``'s."""
    batches = operations(client, store, n)
    lean = [f"lean {step}" for step in ("deliver", "claim_for", "unsubscribe")]
    singles = single_operations(store, n)
    if op not in batches and op not in lean and op not in singles:
        names = [*batches, *singles, *lean]
        raise SystemExit(f"--split takes one of: {', '.join(names)}")
    if op not in batches and op in singles:
        prepare, call = singles[op]
        for i in range(n if prepare else 0):
            prepare(i)  # type: ignore[misc]
        batches = {op: lambda: [call(i) for i in range(n)]}
    if op in lean:
        client.function_load(LEAN, replace=True)
        subscribed(client, store.tenant, 9 * 10**6, n)
        prepared = lean_life(client, store.tenant, 9 * 10**6, n)
        # each step's calls computed once the steps before it ran
        batches = {f"lean {step}": prepare for step, prepare in prepared.items()}
    for name, made in batches.items():
        batch = made() if op in lean else made
        if name == op:
            profile = server.dump(batch)
            total, found = summary(profile), inclusive(profile)
            profile.unlink()
            return [f"{op}, {n:,} calls", "", *split_rows(total, n, found)]
        batch()
    raise AssertionError("unreachable")


def sketch_counts(server: Counted, client: redis.Redis, n: int, rows: int) -> dict[str, float]:
    """The same life cycles through ``floor.py``'s sketches (the commands of each path
    on a tenant-wide layout, checking nothing), with call tokens; the event's
    life again on the compact layout (``floor.compact_keys``)."""

    def per_call(_: redis.Redis, batch: Callable[[], Any]) -> tuple[float, int]:
        client.config_resetstat()
        total = server.count(batch)
        calls = int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
        return total / max(1, calls), calls

    client.function_load(SKETCH, replace=True)
    fill_sketch(client, rows)
    lives = sketch_lives(client, n, 10**6, tokens=True, mean_fcall=per_call)
    out = {f"sketch: {name}": count for name, count in lives.items()}
    # The event's life again with the election entries, wait rows and registration
    # order in listpack buckets, as the library keeps them to meet its memory targets.
    fill_compact(client, n)
    compact = event_sketch_lives(client, n, 2 * 10**6, True, per_call, event_keys=compact_keys)
    for name, count in compact.items():
        out[f"sketch, compact layout: {name}"] = count
    return out


def copy_tenant(client: redis.Redis, tenant: str, copies: Iterable[str]) -> None:
    """Every key of ``tenant`` copied into each tenant of ``copies``, so that lean
    functions run on the library's items in the same buckets, of the same sizes."""
    copies = list(copies)
    for key in client.scan_iter(match=f"agentplane:{{{tenant}}}:*", count=1000):
        for copy in copies:
            client.copy(key, key.replace(f"{{{tenant}}}".encode(), f"{{{copy}}}".encode()))


def lean_counts(
    server: Counted, client: redis.Redis, store: RedisStore, n: int
) -> dict[str, float]:
    """The event's life through ``lean.py``'s lean functions, which send the library's
    commands on its layout with the least Lua the path allows, and through its
    other two sets (``lean.MODES``), each in a copy of the tenant the library's
    own lives ran in, on the same items (their waits registered by the library
    first)."""
    client.function_load(LEAN, replace=True)
    tenants = {mode: f"{store.tenant}-{mode}" for mode in LEAN_ROWS}
    copy_tenant(client, store.tenant, tenants.values())
    out: dict[str, float] = {}
    base = 9 * 10**6
    for mode, name in LEAN_ROWS.items():
        subscribed(client, tenants[mode], base, n)
        life = lean_life(client, tenants[mode], base, n, mode)
        counts = {step: server.count(prepare()) / n for step, prepare in life.items()}
        out.update({f"{name}: {step}": count for step, count in counts.items()})
        out[f"{name}: event life"] = sum(counts.values())
    client.function_delete("agentplane_lean")
    return out


def lean_timer_counts(
    server: Counted, client: redis.Redis, store: RedisStore, n: int
) -> dict[str, float]:
    """A timer's life through ``lean.py``'s lean timer functions (the library's
    commands on its layout with the least Lua the path allows), in a copy of the
    tenant the library's own timer lives ran in, on timers of the same runs and
    instants."""
    client.function_load(LEAN, replace=True)
    tenant = f"{store.tenant}-timers"
    copy_tenant(client, store.tenant, [tenant])
    _, life = timer_lives(store, LeanTimers(client, tenant), 0, n)
    counts = {step: server.count(prepare()) / n for step, prepare in life.items()}
    client.function_delete("agentplane_lean")
    name = "lean, the library's layout"
    return {
        f"{name}: arm": counts["arm"],
        f"{name}: claim_due, per timer (pages of 128)": counts["claim_due"],
        f"{name}: disarm": counts["disarm"],
        f"{name}: timer life": sum(counts.values()),
    }


#: The rows of each set of ``lean.py``'s functions.
LEAN_ROWS = {
    "lean": "lean, the library's layout",
    "fewest": "lean, the fewest commands",
    "bare": "lean, the fewest commands, the strings from the client",
}


#: Where ``stages`` stops ``deliver``: each a line of its body in the library's source
#: and the stop put after it ("" for before the body's first line).
DELIVER_BODY = (
    "    local at = instant_arg(ARGV[1])\n    local event = event_args(2)\n"
    "    local f = event_read(event.eid)\n    if not f then\n"
)
STAGES = {
    "entering deliver's function (keys bound, the guard)": "",
    "and its arguments read (event_args)": "    local event = event_args(2)\n",
    "and its row looked up (event_read: none)": "    local f = event_read(event.eid)\n",
    "and its key's bucket (the hash, the geometry, the named keys)": (
        "    local h, key = key_bucket(kind .. nv) -- its key bucket\n"
    ),
    "and the key's first waits read (WAIT.heads)": (
        "    local entry, own, any = WAIT.heads(key, h, enc(event.source))\n"
    ),
}


def stopped(source: str, line: str) -> str:
    """The library's source with ``refuse`` after ``line`` (or before the deliver
    body's first line, for ""): a line of ``deliver``'s, found once."""
    stop = "    refuse('stop')\n"
    if line == "":
        return source.replace(DELIVER_BODY, stop + DELIVER_BODY)
    if line in DELIVER_BODY:
        return source.replace(DELIVER_BODY, DELIVER_BODY.replace(line, line + stop))
    if source.count(line) != 1:
        raise RuntimeError(f"not found once in the library: {line!r}")
    return source.replace(line, line + stop)


def stages(server: Counted, client: redis.Redis, store: RedisStore, n: int) -> list[str]:
    """The table of ``--stages``: a store that registered none of the waits delivers an
    event a wait is up for; its first call, kept before it is sent, goes to each
    stopped copy of the library and to the library, ``n`` times each."""
    lib = library()
    if lib.source.count(DELIVER_BODY) != 1:
        raise RuntimeError("deliver's body is not where --stages stops it")
    base = 12 * 10**6
    store.events.subscribe(wait(base), at=at(0))
    ingress = RedisStore(client, tenant=store.tenant)
    # It learns the geometries from an event nobody waits for, so it has met no
    # wait: its next delivery is sent without reading the election first.
    ingress.events.deliver(event(base + 1), at=at(0))
    kept: list[tuple[Any, ...]] = []

    class Kept(Exception):
        pass

    def keep(step: Any, tail: tuple[Any, ...], *_: Any) -> Any:
        kept.append((step.head[1], tail))
        raise Kept

    ingress._driver._run = keep  # type: ignore[method-assign]
    with contextlib.suppress(Kept):
        ingress.events.deliver(event(base), at=at(0))
    function, tail = kept[0]
    function = function.decode() if isinstance(function, bytes) else function
    empty = "redis.register_function('stage_empty', function() return 1 end)"
    client.function_load(f"#!lua name=agentplane_stage_empty\n{empty}", replace=True)
    rows = ["| the first call, up to | instructions | times the trivial script |"]
    rows.append("|---|---:|---:|")
    trivial = client.script_load(TRIVIAL)
    one = server.count(lambda: [client.evalsha(trivial, 0) for _ in range(n)]) / n
    found = {"an empty function, with the same keys and arguments": ("stage_empty", "")}
    for k, (name, line) in enumerate(STAGES.items()):
        found[name] = (f"stage{k}", stopped(lib.source, line))
    found["and the wait's bucket found not named: NEED (the library)"] = ("stage_lib", lib.source)
    for name, (lib_name, source) in found.items():
        target = "stage_empty"
        if source:
            text = source.replace(f"#!lua name={lib.name}", f"#!lua name=agentplane_{lib_name}", 1)
            client.function_load(text.replace(f"agentplane_{lib.version}_", f"{lib_name}_"))
            target = function.replace(f"agentplane_{lib.version}_", f"{lib_name}_")

        def batch(target: str = target) -> None:
            for i in range(n):  # a first send each, as the store sends it
                client.fcall(target, *tail[:-1], f"{FIRST_SEND}{i + 1}")

        count = server.count(batch) / n
        rows.append(f"| {name} | {count:,.0f} | {count / one:.1f} |")
        client.function_delete(f"agentplane_{lib_name}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=256)
    parser.add_argument("--split", metavar="OPERATION", help="where one operation's go, instead")
    parser.add_argument(
        "--stages", action="store_true", help="the first call of an ingress delivery, by step"
    )
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
        if args.split:
            print("\n".join(split(server, client, store, args.calls, args.split)))
            return
        if args.stages:
            print("\n".join(stages(server, client, store, args.calls)))
            return
        found = counts(server, client, store, args.calls)
        found.update(lean_counts(server, client, store, args.calls))
        found.update(lean_timer_counts(server, client, store, args.calls))
        found.update(sketch_counts(server, client, args.calls, args.rows))
        trivial = found["trivial script"]
        print(
            "| server instructions per call | instructions | times the trivial script"
            " | target |\n|---|---:|---:|---:|"
        )
        for name, count in found.items():
            life = name.split(": ", 1)[-1] if name.startswith(("sketch", "lean")) else name
            target = f"{TARGETS[life]} times" if life in TARGETS else ""
            print(f"| {name} | {count:,.0f} | {count / trivial:.1f} | {target} |")


if __name__ == "__main__":
    main()
