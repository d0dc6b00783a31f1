"""The benchmarks run: each prints its tables (at small sizes; --soak runs the whole
suite at its quick sizes). No timing is asserted, only that every figure is there
and the runs' own checks held."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def require_program(request: pytest.FixtureRequest, program: str) -> None:
    """Skips the test where Debian's ``program`` is not on PATH; under
    ``--require-servers`` (CI, which installs it) fails it instead."""
    if shutil.which(program) is None:
        why = f"{program} is not on PATH (apt-get install {program})"
        if request.config.getoption("--require-servers"):
            pytest.fail(why)
        pytest.skip(why)


def assert_rows(out: str, *rows: str) -> None:
    missing = [row for row in rows if row not in out]
    assert not missing, f"not printed: {missing}\n{out}"


@pytest.mark.real
def test_memory_measures_only_the_kinds_asked_for():
    out = run("memory.py", "--server", "valkey", "--sizes", "200", "--kinds", "timer")
    names = [line.split(" | ")[0][2:] for line in out.splitlines() if line.startswith("| arm")]
    assert names == ["armed timer, 1 per run", "armed timer, 20 per run"]
    assert "registered wait" not in out


@pytest.mark.real
def test_layouts_prints_each_candidate_with_its_round_trips():
    """layouts.py: bytes per wait and per event of each candidate layout, its target,
    and whether every call stays one round trip; today's layout is among them."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from layouts import LAYOUTS
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = run("layouts.py", "--server", "valkey", "--items", "3000")
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ")[1:]
        for line in out.splitlines()
        if line.startswith("| wait") or line.startswith("| event")
    }
    assert set(rows) == set(LAYOUTS)
    for name, cells in rows.items():
        assert float(cells[0]) > 0, name
        assert cells[2].rstrip(" |") in ("yes", "two-step", "no"), name


@pytest.mark.real
def test_memory_prints_each_kind_at_each_size_next_to_its_target():
    """memory.py: bytes per item of each kind at each size, its target, and the
    ratio of the smallest size's figure to the largest's."""
    out = run("memory.py", "--server", "valkey", "--sizes", "200,600")
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ")[1:]
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| bytes")
    }
    assert set(rows) == {
        "armed timer, 1 per run",
        "armed timer, 20 per run",
        "registered wait",
        "buffered event (beyond payload)",
    }
    for cells in rows.values():
        small, large, target, ratio = cells[0], cells[1], cells[2], cells[3].rstrip(" |")
        assert float(small) > 0
        assert float(large) > 0
        assert int(target) > 0
        # Each figure is printed to the byte and the ratio to 0.01, both rounded
        # from the unrounded figures: their ratio can differ by what that
        # rounding moves it.
        least, most = (
            (float(small) - 0.5) / (float(large) + 0.5),
            (float(small) + 0.5) / (float(large) - 0.5),
        )
        assert least - 0.005 <= float(ratio) <= most + 0.005, cells


@pytest.mark.real
def test_targets_prints_every_figure_next_to_its_ceiling():
    out = run("targets.py", "--rows", "200", "--items", "300", "--calls", "100")
    assert_rows(
        out,
        "| trivial script |",
        "| event life |",
        "| timer life, completed by disarm_many |",
        "| longest call (",
        "| longest call with SLOWLOG off (",
        "| trivial script, among them: longest call |",
        "| trivial script, among them: calls over 1 ms, of 200 |",  # after each life
        "| buffered event (beyond payload) |",
        "| armed timer, 1 per run |",
        "| armed timer, 20 per run |",
        "| registered wait |",
        "| trivial EVALSHA (calls/s) |",
        "| deliver (resumes a wait) |",  # every single operation, not a sample of them
        "| claim_due (a page of one) |",
        "| close (a wait and a timer) |",
    )


@pytest.mark.real
def test_the_benchmarks_fill_puts_every_structure_past_its_compact_encoding():
    """The measured calls find each of the tenant's fixed keys in the encoding a
    tenant of its size has (a hash table, a skiplist), none in a listpack that costs
    a scan of its entries per entry written. (Timer buckets and the wake list, of at
    most two markers, are small listpacks by design, the time buckets' indexes
    and counts hold one entry per bucket, and the registry of running workers
    holds one entry per worker: docs/keys.md.)"""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from targets import fill
    finally:
        sys.path.remove(str(BENCHMARKS))
    import redis

    from agentplane_redis import RedisStore
    from agentplane_redis.embedded import Server

    with Server("valkey") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        store = RedisStore(client, tenant="acme")
        fill(store, 600)  # past 512 hash and 128 sorted-set entries
        # reply:old exists once a generation of remembered replies is full (1 MiB)
        buckets = (
            set(store.keys.timer_buckets())
            | set(store.keys.key_buckets())
            | set(store.keys.wait_buckets())
        )
        found = {
            key: client.object("encoding", key)
            for key in store.keys.all()
            if key
            not in (
                store.keys.key("replies_old"),
                store.keys.key("geometry"),
                store.keys.key("live"),
                store.keys.key("live_index"),
                store.keys.key("wait_order"),
                store.keys.key("wait_order_index"),
                store.keys.key("wake"),
                store.keys.key("workers"),
            )
            and key not in buckets
        }
    compact = {k: e for k, e in found.items() if e in ("listpack", "ziplist", "intset")}
    assert None not in found.values(), found
    assert not compact, compact


@pytest.mark.real
def test_floor_prints_the_sketches_and_the_fewest_entries_next_to_the_library():
    out = run("floor.py", "--items", "300", "--calls", "100")
    assert_rows(
        out,
        "| trivial script (EVALSHA) |",
        "| one HSET inside a function, beyond entering it (a hash of 10,000) |",
        "| sketch: timer life |",
        "| sketch without call tokens: event life |",
        "| this library: event life |",
        "| this library: timer life |",
        "| armed timer | 150 |",
        "| registered wait | 200 |",
        "| armed timer, held timers kept out of the walk | 150 |",
        "| sorted-set entry, 8-byte member |",
    )
    fewest = {
        cells[0]: float(cells[2])
        for cells in (line.strip("| ").split(" | ") for line in out.splitlines())
        if cells[0].startswith("armed timer")
    }
    # a third entry per timer costs memory: the figure comes from the server
    assert fewest["armed timer, held timers kept out of the walk"] > fewest["armed timer"]


@pytest.mark.real
def test_server_time_prints_every_script_step():
    out = run("server_time.py", "--events", "200")
    for name in ("buffer", "deliver", "claim_due", "claim_due, limit=1", "disarm", "purge"):
        assert f"\n{name} " in out
    assert "worst p99:" in out


@pytest.mark.real
def test_costs_prices_each_ingredient_of_a_call(request):
    """costs.py: instructions per key, argument, command, Lua step and reply shape,
    each against the trivial call of the same run."""
    require_program(request, "valgrind")
    out = run("costs.py", "--calls", "12")
    prices = {
        line.split(" | ")[0].lstrip("| "): int(line.split(" | ")[1].replace(",", ""))
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith(("| ingredient", "| *"))
    }
    assert len(prices) == 27, prices
    assert prices["a trivial function call (`return 1`)"] > 0
    # a string's bytes are read as it is made: a long one costs more than a short one
    assert (
        prices["a concatenation making 1 KiB (each byte hashed as Lua makes it)"]
        > prices["a concatenation of two strings"]
    )
    # a command costs more than the key it names
    assert prices["HGET, a field of 2,000"] > prices["a key declared (15 keys)"] > 0
    # the library's helpers, priced the same way: a held row, with its holder, takes
    # more to read than a live one, and a reply's text written directly costs less
    # than serialize's walk
    assert (
        0
        < prices["read a live event row (event_fields)"]
        < prices["read a held event row (event_fields)"]
    )
    assert (
        0
        < prices["the same text written directly (sub_status)"]
        < prices["a subscription reply's text through serialize"]
    )


@pytest.mark.real
def test_helpers_times_the_library_s_own_lua():
    out = run("helpers.py", "--calls", "50", "--rounds", "1")
    assert_rows(
        out,
        "| read a timer's id and run from its member |",
        "| read and check an event row |",
        "| write an event row (event_pack) |",
        "| split a timer id into run and effect |",
        "| enter deliver's function (18 keys by role, 12 arguments) |",
    )


@pytest.mark.real
def test_call_time_splits_every_single_operation_s_call():
    out = run("call_time.py", "--rows", "100", "--calls", "40")
    assert_rows(
        out,
        "| µs per call, one connection | whole call | round trip | of which the server |",
        "| buffer |",
        "| claim_for |",
        "| close (a wait and a timer) |",
    )


@pytest.mark.real
def test_replies_times_each_reply_shape_in_both_forms():
    out = run("replies.py", "--calls", "20", "--rounds", "1")
    assert_rows(
        out,
        "| a status (`buffer`, `arm`, `disarm`) |",
        "| `claim_for` that claims (an event row and its payload) |",
        "| a `claim_due` step of 16 timers |",
    )


@pytest.mark.real
def test_instructions_counts_the_server_s_work_under_callgrind(request):
    """Valgrind comes from Debian (apt-get install valgrind); CI installs it."""
    require_program(request, "valgrind")
    out = run("instructions.py", "--rows", "150", "--calls", "24")
    assert_rows(
        out,
        "| trivial script |",
        "| event life |",
        "| timer life, completed by disarm_many |",
        "| deliver from another store (it names no wait bucket: it reads the election first) |",
        "| sketch: timer life |",
        "| sketch, compact layout: event life |",
        "| lean, the library's layout: event life |",
        "| lean, the fewest commands: event life |",
        "| lean, the fewest commands, the strings from the client: event life |",
        "| lean, the library's layout: timer life |",
        "| the same, with the call token (a first send) and the reply remembered |",
        "| close (a wait and a timer) |",
        "| disarm_run (one timer) |",
    )
    # where one operation's instructions go, by the embedded Valkey's own functions
    split = run("instructions.py", "--rows", "150", "--calls", "24", "--split", "claim_for")
    shares = {
        line.split(" | ")[0].lstrip("| "): int(line.split(" | ")[1].replace(",", ""))
        for line in split.splitlines()
        if line.startswith("| ") and not line.startswith("| part of")
    }
    whole = shares.pop("the whole call")
    commands = shares.pop("of which the commands themselves (scriptCall)")
    assert 0 < commands < shares["redis.call: the commands, their arguments and replies"]
    collector = shares.pop("Lua's garbage collector")  # none in a run too short for a step
    assert collector >= 0
    assert all(count > 0 for count in shares.values()), shares
    assert abs(sum(shares.values()) + collector - whole) <= len(shares) + 1, (shares, whole)
    # an operation on a whole run, prepared as targets.py prepares it
    run_split = run("instructions.py", "--rows", "150", "--calls", "8", "--split", "seal")
    assert "| the rest of the Lua |" in run_split, run_split
    assert "seal, 8 calls" in run_split, run_split
    # an ingress delivery's first call, stopped at each step of deliver's usual path
    steps = run("instructions.py", "--rows", "150", "--calls", "8", "--stages")
    counts = [
        int(line.split(" | ")[1].replace(",", ""))
        for line in steps.splitlines()
        if line.startswith("| ") and not line.startswith("| the first call")
    ]
    assert len(counts) == 7, steps
    assert "| and the wait's bucket found not named: NEED (the library) |" in steps
    assert counts[0] < counts[-1], steps
    assert counts[1] < counts[-1], steps


@pytest.mark.real
def test_the_lean_functions_write_what_the_library_writes():
    """lean.py: an event's life through each set of its lean functions, and a timer's
    life through its timer functions, leave every key of the tenant as the
    library's leave it, remembered replies included (but those of the set that
    answers the rows it read), and each call's server time is printed beside the
    library's."""
    out = run("lean.py", "--calls", "40")
    for mode in ("lean", "fewest", "bare"):
        assert f"{mode}: keys that differ after 40 lives each: none" in out, out
    assert "timers: keys that differ after 40 lives: none" in out, out
    assert_rows(out, "| deliver |", "| claim_for |", "| unsubscribe |", "| arm |", "| disarm |")


@pytest.mark.real
def test_slot_move_counts_a_tenants_keys_and_moves_them_in_one_migrate():
    """slot_move.py: the keys in the tenant's slot as it grows, then one MIGRATE, after
    which the store counts what it counted before (its own assertion)."""
    out = run("slot_move.py", "--items", "150")
    rows = [line for line in out.splitlines() if line.startswith("| 150 ")]
    assert len(rows) == 3, out
    keys = [int(row.split(" | ")[1].replace(",", "")) for row in rows]
    assert keys == sorted(keys), out
    assert keys[0] > 0, out
    assert f"moved {keys[-1]:,} keys in one MIGRATE" in out


@pytest.mark.real
def test_flatness_and_contention_run_and_check_their_claims():
    flat = run("flatness.py", "--small", "200", "--large", "2000", "--calls", "20")
    for op in ("buffer", "deliver", "claim_for", "arm", "claim_due", "disarm"):
        assert f"| {op} |" in flat
        # server time and the caller's latency, on each tenant
        row = next(line for line in flat.splitlines() if line.startswith(f"| {op} |"))
        assert row.count(" µs |") == 4, row
    assert "| pending (next_due) |" in flat
    assert " malloc); 200 and 2,000 rows" in flat  # the server's allocator is named
    # Valkey logs the commands inside a script without a time of their own.
    assert "| a command inside the operation" not in flat
    assert "The server logs the commands inside a script with no time of their own" in flat
    hot = run("contention.py", "--events", "300", "--processes", "8")
    assert "| store `claim_for` (one script) |" in hot
    assert "| WATCH/MULTI |" in hot


@pytest.mark.real
def test_flatness_shows_the_commands_inside_an_operation_where_redis_times_them(request):
    """Debian's redis-server (apt-get install redis-server); CI installs it."""
    if "redis7" not in request.config.getoption("--backends").split(","):
        pytest.skip("redis7 not selected")
    require_program(request, "redis-server")
    args = ("--server", "redis", "--small", "100", "--large", "400", "--calls", "20")
    flat = run("flatness.py", *args)
    for command in ("buffer: ZADD event:key:<bucket>", "erase_payload: ZREM event:key:<bucket>"):
        assert f"| {command} |" in flat
    assert "no time of their own" not in flat


@pytest.mark.real
def test_the_benchmarks_flush_before_they_return_on_valkey_too(monkeypatch):
    """Valkey flushes in the background by default: the benchmarks' flush has freed
    every key when it returns, so the memory they read next is not still falling."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import redis
    import targets

    from agentplane_redis.embedded import Server

    with Server("valkey") as server:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("lazyfree-lazy-user-flush") == {"lazyfree-lazy-user-flush": "yes"}
        empty = int(client.info("memory")["used_memory"])
        pipe = client.pipeline(transaction=False)
        for i in range(200):
            pipe.hset("big", mapping={f"f{i}-{j}": "x" * 40 for j in range(500)})
        pipe.execute()
        assert int(client.info("memory")["used_memory"]) > empty + 5_000_000
        targets.flush(client)
        assert client.dbsize() == 0
        assert int(client.info("memory")["used_memory"]) < empty + 1_000_000


def test_a_trivial_script_under_a_microsecond_leaves_its_multiples_out(monkeypatch):
    """SLOWLOG counts whole microseconds: a trivial script's p50 can read 0, and the
    script-time table then prints the times without a multiple of it."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import targets

    lives = {"trivial script": 0.0, "event life": 180.0}
    sent = {"trivial script": 1.0, "event life": 300.0}
    assert targets.script_time_rows(lives, sent)[2:] == [
        "| trivial script | 0.0 |  | 1.0 |",
        "| event life | 180.0 |  | 300.0 |",
    ]
    lives["trivial script"] = 2.0
    assert targets.script_time_rows(lives, sent)[3] == "| event life | 180.0 | 90.0 | 300.0 |"
    # a count of calls has no multiple of the trivial script's time
    lives["calls over 1 ms, of 10,317"], sent["calls over 1 ms, of 10,317"] = 11.0, 12.0
    row = "| calls over 1 ms, of 10,317 | 11.0 |  | 12.0 |"
    assert targets.script_time_rows(lives, sent)[4] == row


def test_flatness_reads_each_call_s_tenant_and_a_median_finer_than_a_microsecond(
    monkeypatch,
):
    """SLOWLOG records whole microseconds: the p50 is interpolated within its
    microsecond, and each logged call goes to the tenant its first key names."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import flatness

    assert flatness.p50([5, 5, 5]) == 5
    assert flatness.p50([3, 3, 3, 4]) == pytest.approx(3 - 0.5 + 2 / 3)
    assert flatness.p50([3, 4, 4, 4]) == pytest.approx(4 - 0.5 + 1 / 3)
    assert flatness.p50([1, 2, 3, 100]) == pytest.approx(2.5)
    entry = {"command": b"FCALL agentplane_x_arm 6 agentplane:{large}:timer agentplane:{large}:t"}
    assert flatness.tenant_of(entry) == "large"
    assert flatness.tenant_of({"command": "EVALSHA ab12 2 agentplane:{small}:event x"}) == "small"
    assert flatness.tenant_of({"command": "PING"}) == ""
    inside = {"command": b"ZADD agentplane:{large}:event:key:12 0 m"}
    assert flatness.tenant_of(inside) == "large"
    assert flatness.command_of(inside) == "ZADD event:key:<bucket>"


@pytest.mark.real
def test_the_drain_runs_against_the_ceiling_and_the_peers(request):
    """The drain next to the trivial-script ceiling. With --peers: against arq, saq
    and bullmq too, which it installs into benchmarks/.peers-venv from the package
    index the first time (the default run installs nothing). With --soak: the whole
    suite at its quick sizes, peers included."""
    peers = request.config.getoption("--peers") or request.config.getoption("--soak")
    if request.config.getoption("--soak"):
        out = run("suite.py", "--quick", timeout=3000)
    else:
        out = run("drain.py", "--jobs", "800", "--runs", "1", *([] if peers else ["--peers", ""]))
    assert "| trivial script |" in out
    assert "| agentplane-redis, disarm_many |" in out
    for peer in ("arq", "saq", "bullmq"):
        assert (f"| {peer} |" in out) == bool(peers)


def test_every_single_operation_the_throughput_times_does_its_usual_work(monkeypatch):
    """Each operation ``targets.throughput`` times finds what its call is prepared
    for (a delivery its wait, a claim its event, a disarm its timer), so no ratio
    is of a call that found nothing to do."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import targets

    from agentplane_redis import (
        BufferedEvent,
        Closed,
        EventStats,
        Matched,
        Minter,
        Resumed,
        Retired,
        Subscription,
    )
    from agentplane_redis.testing import fake_store

    store = fake_store("bench")
    found = {}
    for name, op in targets.prepared_operations(store, 3):
        found[name] = [op(i) for i in range(3)]
    usual = {
        "buffer": lambda r: r is True,
        "subscribe": lambda r: r is None,
        "deliver (resumes a wait)": lambda r: isinstance(r, Resumed),
        "deliver_to": lambda r: isinstance(r, Matched),
        "match_waiter": lambda r: isinstance(r, Subscription),
        "claim_for": lambda r: isinstance(r, BufferedEvent),
        "wait (finds its event)": lambda r: isinstance(r, BufferedEvent),
        "unsubscribe (sheds its claim)": lambda r: r is None,
        "unsubscribe_run (one wait)": lambda r: r == Retired(1, ()),
        "park_wait": lambda r: r is None,
        "erase_payload": lambda r: r is True,
        "minter": lambda r: isinstance(r, Minter),
        "stats": lambda r: isinstance(r, EventStats),
        "arm": lambda r: r is True,
        "claim_due (a page of one)": lambda r: len(r) == 1,
        "disarm": lambda r: r is True,
        "disarm_run (one timer)": lambda r: r == 1,
        "pending_count": lambda r: r > 0,
        "next_due": lambda r: r is not None,
        "seal": lambda r: r is True,
        "is_sealed": lambda r: r is True,
        "close (a wait and a timer)": lambda r: (
            isinstance(r, Closed) and r.timers == 1 and r.retired.waits == 1
        ),
    }
    assert set(found) == set(usual)
    odd = {name: r for name, r in found.items() if not all(map(usual[name], r))}
    assert not odd, odd
    assert store.events.stats().consumed == 3  # the claims unsubscribe shed, none other
    claimed = [t.run for r in found["claim_due (a page of one)"] for t in r]
    assert claimed == ["tp-due-0", "tp-due-1", "tp-due-2"]  # soonest first, one a call


@pytest.mark.real
def test_lateness_reports_each_case_and_the_idle_commands():
    """lateness.py: p50, p99 and max for the idle worker and the streams, with wake-ups
    and with polling, and the commands an idle worker sends per minute."""
    out = run(
        "lateness.py",
        "--tries",
        "3",
        "--timers",
        "12",
        "--seconds",
        "1",
        "--idle",
        "2",
        timeout=300,
    )
    for how in ("wake-ups", "polling every second"):
        assert_rows(
            out,
            f"| idle worker, {how} | 3 |",
            f"| 12 timers over 1 s, 1 worker, {how} | 12 |",
            f"| 12 timers over 1 s, 4 workers, {how} | 12 |",
            f"| {how} | ",
        )
