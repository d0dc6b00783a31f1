"""The Lua work inside a step: the library's own helpers timed in loops, on a server of their own.

    python benchmarks/helpers.py [--server valkey|redis] [--calls 2000] [--rounds 3]

Loads the operations' library (``agentplane_redis.scripts.library()``) under
a name of its own, with a few functions appended that run one helper 100
times over a typical input (a 16-field event row, a timer id and member),
and reads each function's mean server time per call from ``INFO
commandstats``. Each figure is the helper's cost per run, the empty loop's
taken off, in microseconds: what reading, checking and writing rows costs a
step besides its Redis commands. The median of ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import statistics

import redis
from targets import server_mean, server_version

from agentplane_redis.embedded import Server
from agentplane_redis.scripts import catalogue, key_binding, library

RUNS = 100
EVENT_ROW = 'L-- 1001767225600000 payment.settled    order A-1 \n{"amount":4200}'
HELD_ROW = (
    "H-- 1001767225600000 run-1 await-payment 1001767225600001 payment.settled    order A-1 "
    '\n{"amount":4200}'
)
#: helper -> the Lua it runs RUNS times (EROW, HROW, TID, MEMBER, FIELDS, SUB are its inputs).
PIECES = {
    "empty loop": "",
    "read a timer's id and run from its member": "local tid, run = member_tid(MEMBER)",
    "read a live event row (event_fields)": 'local f = event_fields("stripe evt_1 ", EROW)',
    "read a held event row (event_fields)": 'local f = event_fields("stripe evt_1 ", HROW)',
    "check an event row's fields (event_fault)": "local x = event_fault(FIELDS)",
    "read and check an event row": 'local f = event_parse("stripe evt_1 ", EROW)',
    "write an event row (event_pack)": "local s = event_pack(FIELDS)",
    "a subscription reply's text through serialize": (
        'local n = serialize({ "RESUMED", "1767225600000", SUB }, {}, 0)'
    ),
    "the same text written directly (sub_status)": (
        'local r = sub_status("RESUMED", "1767225600000", SUB)'
    ),
    "split a timer id into run and effect": "local a, b = wid_parts(TID)",
    "an instant as a member's 16 digits (a new one each run)": (
        "local s = instant_key(1767225600000 + _)"
    ),
    "enter deliver's function (18 keys by role, 12 arguments)": "ENTER(KEYS18, ARGS12)",
    "the same, keys set role by role into a growing table": "BY_ROLES(KEYS18, ARGS12)",
}


#: What the library's entry does first: its own string, table and redis bound
#: (``scripts._LIBRARIES``), which the helpers read.
BIND = "if not string then string, table, redis = OPS.libraries() end"


def source() -> str:
    lib = library()
    body = lib.source.replace(f"#!lua name={lib.name}", "#!lua name=agentplane_helpers", 1)
    roles = catalogue()["deliver"].roles
    names = ", ".join(f'"{role}"' for role in roles)
    keys = ", ".join(f'"agentplane:{{bench}}:{role}"' for role in roles)
    inputs = f"""
local EROW = {EVENT_ROW!r}
local HROW = {HELD_ROW!r}
local TID = "run-1 t-101 "
local MEMBER = TID .. "0f"
local FIELDS = {{ "live", "stripe", "evt_1", "payment.settled", "1001767225600000", "", "", "",
  "", "", "", "0", "0", "order", "A-1", '{{"amount":4200}}' }}
local SUB = {{ "run-1", "await-payment", "payment.settled 0f  ", {{ "order", "A-1" }} }}
local KEYS18 = {{ {keys} }}
local ARGS12 = {{ "1797000000000abcdef0123456789", "", "1767225600000", "stripe", "evt_1",
  "payment.settled", "{{}}", "", "", "order", "A-1", "" }}
local ENTER = entry(function() return 1 end, {key_binding(roles)}, true)
local ROLES = {{ {names} }}
local function BY_ROLES(keys, args)
  local bound, copied = {{}}, {{}}
  for i = 1, #ROLES do
    bound[ROLES[i]] = keys[i]
  end
  for i = 3, #args do
    copied[i - 2] = args[i]
  end
  return bound, copied
end
"""
    loops = "\n".join(
        f"redis.register_function('helper_{i}', function() {BIND}"
        f" for _ = 1, {RUNS} do {lua} end return 1 end)"
        for i, lua in enumerate(PIECES.values())
    )
    # In a function of their own: the library's chunk has nearly all the locals
    # Lua 5.1 allows one function (200).
    return body + "\nlocal function helpers()\n" + inputs + loops + "\nend\nhelpers()\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        version = server_version(client)
        client.function_load(source())
        client.config_set("slowlog-log-slower-than", -1)
        means: dict[str, list[float]] = {name: [] for name in PIECES}
        for _ in range(args.rounds):
            for i, name in enumerate(PIECES):
                mean, _ = server_mean(
                    client,
                    "fcall",
                    lambda f=f"helper_{i}": [client.fcall(f, 0) for _ in range(args.calls)],
                )
                means[name].append(mean)
        empty = statistics.median(means["empty loop"])
        runs = f"{args.calls:,} calls of {RUNS} runs each, {args.rounds} rounds"
        print(f"{args.server} {version}; {runs}")
        print()
        print("| helper, per run | µs |\n|---|---:|")
        for name, values in means.items():
            if name != "empty loop":
                print(f"| {name} | {(statistics.median(values) - empty) / RUNS:.2f} |")


if __name__ == "__main__":
    main()
