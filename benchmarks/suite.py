"""Every performance figure in one command, each next to its ceiling from the same run.

    python benchmarks/suite.py [--server valkey|redis] [--quick] [--out FILE]

Runs, one after another on a throwaway server each:

* ``targets.py``: script time per operation and per life cycle against a
  trivial script, memory per item, throughput through the store against a
  trivial ``EVALSHA``;
* ``flatness.py``: each operation's server time with 1,000 rows in the tenant
  and with 1,000,000 (and a neighbour of 1,000,000);
* ``drain.py``: 4 processes draining 20,000 past-due timers, side by side with
  arq, saq and bullmq (installed into a venv of their own), against the
  4-process trivial-script ceiling;
* ``contention.py``: 8 processes claiming on one hot correlation key, against
  a WATCH/MULTI claim;
* ``floor.py``: the targets next to the fewest entries per item and sketches
  of the life cycles that check nothing, measured on the same server;
* ``helpers.py``: the Lua work inside a step, the library's helpers timed in
  loops (reading, checking and writing rows);
* ``replies.py``: what reading each reply shape costs the client, as an array
  and as the one string the store's scripts answer;
* ``call_time.py``: where one call of each single operation spends its time:
  the round trip, the server's part of it, and the store's own Python;
* ``server_time.py``: each script step's server time, p50 / p99 / max, at
  default limits and typical rows (payloads of 2 KB, three keys), against the
  contract's 0.5 ms at p99;
* ``memory.py``: bytes per timer, wait and event at 10,000, 100,000 and
  1,000,000 items, against their targets;
* ``lateness.py``: timer fire lateness through worker processes, against the
  same worker polling every second;
* ``costs.py``: the server's price of each ingredient of a call (a key, an
  argument, each kind of command, a Lua step, a reply), under callgrind;
* ``instructions.py``: the server's instructions per operation and per life
  cycle under callgrind, beside ``lean.py``'s lean functions and ``floor.py``'s
  sketches, the figure the machine's load does not move (where
  valgrind is installed: ``apt-get install valgrind``; otherwise the report
  says it was left out).

``--quick`` runs each at a small size (a smoke test of the suite, minutes
instead of most of an hour); the figures in ``docs/performance.md`` come from
the full sizes. ``--out`` also writes the report to a file.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = {
    "targets.py": ["--rows", "10000", "--items", "100000", "--calls", "2000"],
    "flatness.py": ["--small", "1000", "--large", "1000000", "--calls", "300"],
    "drain.py": ["--jobs", "20000", "--processes", "4", "--runs", "3"],
    "contention.py": ["--events", "8000", "--processes", "8"],
    "floor.py": ["--items", "100000", "--calls", "2000"],
    "helpers.py": ["--calls", "2000"],
    "replies.py": ["--calls", "1000", "--rounds", "9"],
    "call_time.py": ["--rows", "2000", "--calls", "2000"],
    "server_time.py": ["--events", "5000"],
    "memory.py": ["--sizes", "10000,100000,1000000"],
    "lateness.py": ["--tries", "40", "--timers", "1000", "--seconds", "20"],
    "costs.py": ["--calls", "200"],
    "instructions.py": ["--rows", "2000", "--calls", "256"],
}
QUICK = {
    "targets.py": ["--rows", "1000", "--items", "2000", "--calls", "300"],
    "flatness.py": ["--small", "1000", "--large", "20000", "--calls", "100"],
    "drain.py": ["--jobs", "4000", "--processes", "4", "--runs", "1"],
    "contention.py": ["--events", "1000", "--processes", "8"],
    "floor.py": ["--items", "2000", "--calls", "300"],
    "helpers.py": ["--calls", "200"],
    "replies.py": ["--calls", "100", "--rounds", "3"],
    "call_time.py": ["--rows", "200", "--calls", "200"],
    "server_time.py": ["--events", "300"],
    "memory.py": ["--sizes", "2000,6000"],
    "lateness.py": ["--tries", "3", "--timers", "40", "--seconds", "2", "--idle", "2"],
    "costs.py": ["--calls", "20"],
    "instructions.py": ["--rows", "200", "--calls", "32"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    report = [
        f"# agentplane-redis benchmarks, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python benchmarks/suite.py --server {args.server}{' --quick' if args.quick else ''}`;"
        f" {platform.python_implementation()} {platform.python_version()},"
        f" {cores} cores, {platform.machine()}",
    ]
    for script, options in (QUICK if args.quick else FULL).items():
        if script in ("costs.py", "instructions.py") and shutil.which("valgrind") is None:
            missing = "valgrind is not on PATH (apt-get install valgrind)"
            report += ["", f"## {script}: left out, {missing}"]
            print(report[-1], flush=True)
            continue
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(HERE / script), "--server", args.server, *options],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"{script} failed")
        took = time.monotonic() - t0
        report += ["", f"## {script} {' '.join(options)} ({took:.0f} s)", "", done.stdout.strip()]
        print("\n".join(report[-4:]), flush=True)
    if args.out:
        args.out.write_text("\n".join(report) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
