"""What reading a reply costs the client: each reply shape, as an array and as one string.

    python benchmarks/replies.py [--server valkey|redis] [--calls 1000] [--rounds 9]

A store's scripts answer a reply of words as one status line and any other
reply of a writing call as the text it remembers under the call token
(``lua/README.md``, "Replies"), where they answered arrays. This times both
forms of the same replies through one connection, as the store reads them:
a script that returns the reply in each form (``EVALSHA``, so the server's
side is the same small script), the reply read undecoded by redis-py's own
reader (or hiredis where it is installed), and read into its list as the
driver does (``codec.reply_list``: a status line split into its words, the
text read by ``codec.replayed``). Each figure is microseconds per call, the median of
``--rounds`` rounds that alternate the two forms, each of ``--calls`` calls.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import redis
from targets import reply_parser, server_version

from agentplane_redis import codec
from agentplane_redis.embedded import Server

INSTANT = b"1767225600000"
EVENT_ROW = (
    b"stripe evt_1 H-- 1001767225600000 run-1 await 1001767225600001 payment.settled    "
    b"order A-1 \n"
)
#: A claim_due step (lua/claim_due.lua): status, now, more, run to retire, skip,
#: then each timer's member, fire_at and claim count.
STEP = [b"OK", INSTANT, b"1", b"", b"0"]
for _i in range(16):
    STEP += [b"run-%d t-%d 0f" % (_i, _i), INSTANT, b"1"]
#: name -> (the reply as a list, whether it is of words)
SHAPES: dict[str, tuple[list[bytes], bool]] = {
    "a status (`buffer`, `arm`, `disarm`)": ([b"NEW"], True),
    "a status and an instant (`subscribe`, `deliver` that buffers)": ([b"OK", INSTANT], True),
    "`claim_for` that claims (an event row and its payload)": (
        [b"HIT", INSTANT, EVENT_ROW, b"1", b'{"order":"A-1","amount":1250}'],
        False,
    ),
    "a `claim_due` step of 16 timers": (STEP, False),
}


def lua_string(data: bytes) -> str:
    return '"' + "".join(f"\\{b}" for b in data) + '"'


def text(reply: list[bytes]) -> bytes:
    """The reply as the text a script remembers (``lua/_lib/core.lua``, serialize)."""
    return b"*%d:" % len(reply) + b"".join(b"$%d:%b" % (len(e), e) for e in reply)


def scripts(reply: list[bytes], words: bool) -> tuple[str, str]:
    """A script answering the reply as an array, and one answering it as one string."""
    array = "return {" + ", ".join(lua_string(e) for e in reply) + "}"
    if words:
        return array, "return {ok = " + lua_string(b" ".join(reply)) + "}"
    return array, "return " + lua_string(text(reply))


def measure(client: redis.Redis, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    conn = client.connection_pool.get_connection()
    out = {}
    try:
        for name, (reply, words) in SHAPES.items():
            shas = [client.script_load(s) for s in scripts(reply, words)]
            times: list[list[float]] = [[], []]

            def once(sha: str) -> Any:
                conn.send_command("EVALSHA", sha, 0)
                return codec.reply_list(conn.read_response(disable_decoding=True))

            assert once(shas[0]) == once(shas[1]) == reply, name
            for _ in range(rounds):
                for form, sha in enumerate(shas):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        once(sha)
                    times[form].append((time.perf_counter() - t0) / calls * 1e6)
            out[name] = (statistics.median(times[0]), statistics.median(times[1]))
    finally:
        client.connection_pool.release(conn)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(f"{args.server} {server_version(client)}; replies read by {reply_parser()}\n")
        print(
            "| reply, µs per call on one connection | as an array | as one string | saved |"
            "\n|---|---:|---:|---:|"
        )
        for name, (array, one) in measure(client, args.calls, args.rounds).items():
            print(f"| {name} | {array:.1f} | {one:.1f} | {array - one:.1f} |")


if __name__ == "__main__":
    main()
