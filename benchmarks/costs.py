"""The server's price list: what each ingredient of a script call costs, in
instructions under callgrind, next to a trivial function call in the same run.

A call's cost is the sum of what it is made of: entering the function, each key
and argument it is sent, each command it runs (``redis.call``), each call from
Lua into C (``string.find``, ``string.sub``, ...), each table or string it makes
(and Lua's collector frees later), and its reply. This loads a throwaway library
of functions that each do one of these things a known number of times, on
structures of 2,000 entries, and prints each ingredient's instructions per item
(the function's count less the trivial call's, over the items). These are the
figures that say what a design of the scripts can reach: a life cycle's
commands, keys and Lua steps priced before it is written. A second table prices
the library's own row and reply helpers the same way, each run in a loop of
``helpers.py`` (which times them): what reading, checking and writing an event
row and writing a reply's text cost a call.

    python benchmarks/costs.py [--server valkey|redis] [--calls 200]
"""

from __future__ import annotations

import argparse

import redis
from instructions import Counted
from targets import server_version

import helpers

#: Entries of the hash and the sorted set the commands work on.
ENTRIES = 2_000
#: Items each Lua case repeats its ingredient.
REPEAT = 20

LIBRARY = r"""#!lua name=agentplane_costs
redis.register_function("trivial", function() return 1 end)
redis.register_function("keys_args", function() return 1 end)
redis.register_function("hget", function(k, a)
  for i = 1, 4 do redis.call("HGET", k[1], a[1]) end
  return 1
end)
redis.register_function("hset_new", function(k, a)
  redis.call("HSET", k[1], a[1], a[2])
  return 1
end)
redis.register_function("hdel", function(k, a)
  redis.call("HDEL", k[1], a[1])
  return 1
end)
redis.register_function("zadd_new", function(k, a)
  redis.call("ZADD", k[1], "0", a[1])
  return 1
end)
redis.register_function("zrem", function(k, a)
  redis.call("ZREM", k[1], a[1])
  return 1
end)
redis.register_function("zrangebylex", function(k, a)
  for i = 1, 4 do redis.call("ZRANGEBYLEX", k[1], "[m1", "(m2", "LIMIT", "0", "1") end
  return 1
end)
redis.register_function("hset_hdel", function(k, a)
  redis.call("HSET", k[1], a[1], a[2])
  redis.call("HDEL", k[1], a[1])
  return 1
end)
redis.register_function("zadd_zrem", function(k, a)
  redis.call("ZADD", k[1], "0", a[1])
  redis.call("ZREM", k[1], a[1])
  return 1
end)
redis.register_function("tables", function(k, a)
  for i = 1, @REPEAT@ do local t = { i } end
  return 1
end)
redis.register_function("concat", function(k, a)
  local s, t = a[1], a[2]
  for i = 1, @REPEAT@ do local u = s .. t end
  return 1
end)
redis.register_function("sub", function(k, a)
  local s = a[1]
  for i = 1, @REPEAT@ do local u = string.sub(s, i, i + 5) end
  return 1
end)
redis.register_function("find", function(k, a)
  local s = a[1]
  for i = 1, @REPEAT@ do local u = string.find(s, " ", i, true) end
  return 1
end)
redis.register_function("match4", function(k, a)
  local s = a[1]
  for i = 1, @REPEAT@ do local w, x, y, z = string.match(s, "^(%S+) (%S+) (%S+) (%S+)") end
  return 1
end)
redis.register_function("reply_string", function(k, a) return a[1] end)
redis.register_function("reply_array", function(k, a) return { a[1], a[1], a[1], a[1], a[1] } end)
""".replace("@REPEAT@", str(REPEAT))

TEXT = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron"


def cases() -> list[tuple[str, str, int, str, list[str], object]]:
    """(ingredient, function, items per call, what it is compared with, keys,
    arguments: a list, or a function of the call's number for fresh fields)."""
    keys15 = [f"costs:k{i}" for i in range(15)]
    return [
        ("a key declared (15 keys)", "keys_args", 15, "trivial", keys15, []),
        ("an argument (15 of 10 bytes)", "keys_args", 15, "trivial", [], ["x" * 10] * 15),
        ("HGET, a field of 2,000", "hget", 4, "one key, one argument", ["costs:h"], ["f-7"]),
        (
            "HSET, a new field of 2,000",
            "hset_new",
            1,
            "one key, two arguments",
            ["costs:h"],
            lambda i: [f"new-{i}", "v" * 10],
        ),
        (
            "HDEL, a field of 2,000",
            "hdel",
            1,
            "one key, one argument",
            ["costs:h"],
            lambda i: [f"new-{i}"],
        ),
        (
            "HSET and HDEL of a field, a hash of 2,000 (a hash table)",
            "hset_hdel",
            1,
            "one key, two arguments",
            ["costs:h"],
            ["f-new", "0f"],
        ),
        (
            "HSET and HDEL of a field, a hash of 40 (a listpack)",
            "hset_hdel",
            1,
            "one key, two arguments",
            ["costs:bucket"],
            ["f-new", "0f"],
        ),
        (
            "ZADD and ZREM of a member, a sorted set of 2,000 (a skiplist)",
            "zadd_zrem",
            1,
            "one key, one argument",
            ["costs:z"],
            ["m000777x"],
        ),
        (
            "ZADD and ZREM of a member, a sorted set of 40 (a listpack)",
            "zadd_zrem",
            1,
            "one key, one argument",
            ["costs:small"],
            ["m000017x"],
        ),
        (
            "ZADD, a new member of 2,000",
            "zadd_new",
            1,
            "one key, one argument",
            ["costs:z"],
            lambda i: [f"n{i:06d}"],
        ),
        (
            "ZREM, a member of 2,000",
            "zrem",
            1,
            "one key, one argument",
            ["costs:z"],
            lambda i: [f"n{i:06d}"],
        ),
        ("ZRANGEBYLEX ... LIMIT 0 1", "zrangebylex", 4, "one key", ["costs:z"], []),
        ("a table made", "tables", REPEAT, "trivial", [], []),
        ("a concatenation of two strings", "concat", REPEAT, "two arguments", [], ["abc", "def"]),
        (
            "a concatenation making 1 KiB (each byte hashed as Lua makes it)",
            "concat",
            REPEAT,
            "two 512-byte arguments",
            [],
            ["a" * 512, "b" * 512],
        ),
        ("string.sub", "sub", REPEAT, "one argument", [], [TEXT]),
        ("string.find, plain", "find", REPEAT, "one argument", [], [TEXT]),
        ("string.match, 4 captures", "match4", REPEAT, "one argument", [], [TEXT]),
        ("a reply of one 80-byte string", "reply_string", 1, "one argument", [], [TEXT]),
        ("a reply of five 80-byte strings", "reply_array", 1, "one argument", [], [TEXT]),
    ]


#: The library's own helpers (``helpers.py``'s) the second table prices.
PRICED_HELPERS = (
    "read a live event row (event_fields)",
    "read a held event row (event_fields)",
    "check an event row's fields (event_fault)",
    "write an event row (event_pack)",
    "a subscription reply's text through serialize",
    "the same text written directly (sub_status)",
)

#: What each case is compared with: the trivial call sent the same keys and arguments.
BASES = {
    "trivial": ([], []),
    "one key": (["costs:z"], []),
    "one argument": ([], ["x" * 10]),
    "two arguments": ([], ["abc", "def"]),
    "two 512-byte arguments": ([], ["a" * 512, "b" * 512]),
    "one key, one argument": (["costs:h"], ["f-7"]),
    "one key, two arguments": (["costs:h"], ["f-7", "v" * 10]),
}


def fill(client: redis.Redis) -> None:
    client.hset("costs:h", mapping={f"f-{i}": "v" * 10 for i in range(ENTRIES)})
    client.zadd("costs:z", {f"m{i:06d}": 0 for i in range(ENTRIES)})
    client.hset("costs:bucket", mapping={f"b-{i}": "0f" for i in range(40)})
    client.zadd("costs:small", {f"m{i:06d}": 0 for i in range(40)})


def measure(server: Counted, client: redis.Redis, calls: int) -> list[str]:
    def per_call(function: str, keys: list[str], args: object) -> float:
        def batch() -> None:
            for i in range(calls):
                a = args(i) if callable(args) else args
                client.fcall(function, len(keys), *keys, *a)

        return server.count(batch) / calls

    base = {name: per_call("keys_args", k, a) for name, (k, a) in BASES.items()}
    trivial = per_call("trivial", [], [])
    rows = [
        f"| a trivial function call (`return 1`) | {trivial:,.0f} | 1.00 |",
    ]
    for name, function, items, against, keys, args in cases():
        if function == "keys_args":
            each = (per_call(function, keys, args) - trivial) / items
        else:
            each = (per_call(function, keys, args) - base[against]) / items
        rows.append(f"| {name} | {each:,.0f} | {each / trivial:.2f} |")
    client.function_load(helpers.source(), replace=True)
    index = {name: i for i, name in enumerate(helpers.PIECES)}
    empty = per_call(f"helper_{index['empty loop']}", [], [])
    rows.append("| *the library's helpers, each once* | | |")
    for name in PRICED_HELPERS:
        each = (per_call(f"helper_{index[name]}", [], []) - empty) / helpers.RUNS
        rows.append(f"| {name} | {each:,.0f} | {each / trivial:.2f} |")
    client.function_delete("agentplane_helpers")
    return [
        "| ingredient of a call | instructions each | times the trivial call |",
        "|---|---:|---:|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with Counted(args.server) as server:
        client = redis.Redis.from_url(server.url)
        client.function_load(LIBRARY, replace=True)
        fill(client)
        print(f"{args.server} {server_version(client)} under callgrind; {args.calls} calls each\n")
        print("\n".join(measure(server, client, args.calls)))


if __name__ == "__main__":
    main()
