"""An event's and a timer's life in lean scripts on the library's own layout: what
the same commands cost with as little Lua around them as the path allows.

    python benchmarks/lean.py [--server valkey|redis] [--calls 256]

``LEAN`` is a throwaway function library. Three functions, ``lean_deliver``
(a new event that resumes the oldest wait under its one key),
``lean_claim_for`` (the wait takes back the event held for it) and
``lean_unsubscribe`` (the wait is retired and sheds its claim). Each sends the
same commands as the library's operation on that path, in the same keys, and
writes the same rows, members and remembered replies (``equivalent`` compares
tenants run through the library and through these, key by key).
What they leave out is the Lua a general script needs: they handle one path
and give up (an error) on any other (identifiers that need escapes, a
duplicate, a wait with two keys, a bucket the client did not name, a left
list), they trust the key hash and bucket keys the client computed, and they
read only the fields that path needs. Their checks are the contract's: the
wait exists and is of the event's kind and key, the claim belongs to the
asking wait and is eligible for it, the client's bucket geometry is current,
and each call remembers its reply under its token, bounded as the library
bounds it.

The harness names each wait's order bucket, read from the index beforehand,
so ``lean_unsubscribe`` takes the wait out of it directly; a store names that
bucket only where it knows it, and in a tenant of many waits the library's
``unsubscribe`` lists the wait on the bucket's left list instead, with as many
commands.

Three more, ``lean_fewest_*``, take the same path with the fewest commands it
can: five fewer an event's life (the row is written only where absent instead
of read first; a recovered claim leaves its row as it is, its instant kept in
the mark alone; a retirement reads neither the geometry, nor the order index,
nor the bucket's left list, its buckets proven by the entries it takes from
them). They write what the
library writes here, where a claim recovers at the instant it was taken and no
order bucket has a left list.

Three more, ``lean_bare_*``, take the fewest commands with the strings from
the client: they check no identifier for escapes (a client that built the
components itself), and answer and remember the rows they read instead of
the library's reply text, which the client would decode; the state checks
stay. They write what the others write but for the remembered replies.

A timer's life the same way: ``lean_arm`` (a new timer), ``lean_claim_due``
(a step of the walk, in the steps of ``TIMER_SCAN`` entries the store takes,
pages of 128 timers) and ``lean_disarm`` (a claimed timer) send the library's
commands and write what it writes (``timers_equivalent``), with the keys their
path reads; they give up on a bucket to split, a lapsed lease, a sealed run's
timer or an identifier that needs escapes. Their checks are the contract's:
first arming wins, the client's timer geometry is current, a live lease is
not claimed again, a sealed run's timer is not handed out, a claim's count,
each reply remembered under its token.

``instructions.py`` counts them under callgrind next to the library
(``lean_counts``, ``lean_timer_counts``); run alone, this script checks their
equivalence and prints each call's server time beside the library's.
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import redis
from targets import at, event, server_mean, wait

from agentplane_redis import RedisStore, Timer
from agentplane_redis.codec import instant, payload_text, replayed
from agentplane_redis.drivers import FIRST_SEND
from agentplane_redis.embedded import Server
from agentplane_redis.keys import Geometry, TenantKeys, key_hash, tuple_member
from agentplane_redis.ops import DEFAULT_MAX_PAYLOAD, DEFAULT_TIMER_LEASE_MS, TIMER_SCAN

LEAN = r"""#!lua name=agentplane_lean
-- The event life's path in lean scripts, on the library's layout
-- (benchmarks/lean.py). Any other path is an error.

local TERM, ZEROS, GENERATION = " ", "000000000000000", 1048576

-- A clean identifier's component (docs/keys.md); one that needs escapes is
-- not this path.
local function comp(s)
  if string.find(s, "[%z\1-\33]") then
    error("lean: an identifier that needs escapes")
  end
  return s .. TERM
end

-- The same, for a client that built its identifiers' components itself.
local function plain(s)
  return s .. TERM
end

-- A string's "$<length>:" head from a table, as the library's replies take it:
-- Lua prints a number it concatenates with sprintf.
local LENGTH = {}
for n = 0, 255 do
  LENGTH[n] = "$" .. n .. ":"
end

local function dollar(s)
  return (LENGTH[#s] or ("$" .. #s .. ":")) .. s
end

-- An instant's 16 digits, from its decimal ms (below 10^15).
local function instant(ms)
  return "1" .. string.sub(ZEROS, 1, 15 - #ms) .. ms
end

-- The reply remembered in the call's lane under its number (a first send's,
-- "+" and all), counted into its generation 16 KiB at a time, the bytes in
-- between kept here, as the library does.
local UNCOUNTED = {}
local function remember(replies, old, lane, seq, text)
  redis.call("HSET", replies, lane, seq .. " " .. text)
  local due, bytes = UNCOUNTED[replies], #lane + #seq + #text + 80
  if due and due + bytes < 16384 then
    UNCOUNTED[replies] = due + bytes
    return
  end
  UNCOUNTED[replies] = 0
  if redis.call("HINCRBY", replies, "", (due or 0) + bytes) >= GENERATION then
    redis.call("UNLINK", old)
    redis.call("RENAME", replies, old)
  end
end

-- The first member of key from (inclusive) to (exclusive), or nil.
local function first(key, from, to)
  return redis.call("ZRANGEBYLEX", key, "[" .. from, "(" .. to, "LIMIT", "0", "1")[1]
end

-- Each function is made three times: as the library's commands (fewest
-- false), with the fewest commands its path can take (fewest true), and with
-- those and the strings from the client (bare true; the module's doc).

-- KEYS: events, marks, mark_index, geometry, replies, replies_old, the key
-- bucket of the event's key, the wait bucket of the winner's run.
-- ARGV: at, source, id, kind, namespace, value, payload, the key's hash (8
-- hex digits), key and wait geometry, lane, number.
local function deliver(fewest, bare)
  local comp = bare and plain or comp
  return function(k, a)
    local at, source, kind, ns, value, payload, hash = a[1], a[2], a[4], a[5], a[6], a[7], a[8]
    local eid = comp(source) .. comp(a[3])
    if not fewest and redis.call("HGET", k[1], eid) then
      error("lean: a duplicate")
    end
    local g = redis.call("HMGET", k[4], "key", "wait")
    if (g[1] or "0 0") ~= a[9] or (g[2] or "0 0") ~= a[10] then
      return { "BUCKETS" }
    end
    local kc, nv = comp(kind), comp(ns) .. comp(value)
    local any, own = hash .. "~" .. TERM, hash .. "~" .. comp(source)
    local entry, mine = first(k[7], any, any .. "\255"), first(k[7], own, own .. "\255")
    if not entry or mine then
      error("lean: no wait, or waits of both groups")
    end
    local created, wid = string.sub(entry, #any + 1, #any + 16), string.sub(entry, #any + 17)
    local p = string.find(wid, TERM, 1, true)
    local m = redis.call("HGET", k[8], wid)
    if not m then
      return redis.error_reply("CORRUPT election entry of an unregistered wait")
    end
    -- Its attributes are the row's first four components; then its one key row.
    local e = string.find(m, TERM, string.find(m, TERM, #kc + 1, true) + 1, true)
    e = e and string.find(m, TERM, e + 1, true)
    if not e or string.sub(m, 1, #kc) ~= kc or string.sub(m, e + 1) ~= nv .. created then
      error("lean: another kind or key under the hash, or a wait of two keys")
    end
    local stamp = instant(at)
    local head = "H-- " .. stamp .. TERM .. wid .. stamp .. TERM .. kc .. "   " .. nv .. "\n"
    local row = head .. payload
    if not fewest then
      redis.call("HSET", k[1], eid, row)
    elseif redis.call("HSETNX", k[1], eid, row) == 0 then
      error("lean: a duplicate")
    end
    redis.call("HSET", k[2], wid, at .. " " .. eid)
    redis.call("ZADD", k[3], "0", "L" .. wid)
    redis.call("ZREM", k[7], entry)
    if bare then -- the wait's row as read, which the client decodes
      remember(k[5], k[6], a[11], a[12], "R " .. at .. " " .. wid .. m)
      return { "RESUMED", at, wid, m }
    end
    local text = "*3:$7:RESUMED" .. dollar(at) .. "*4:" .. dollar(string.sub(wid, 1, p - 1))
      .. dollar(string.sub(wid, p + 1, -2)) .. dollar(string.sub(m, 1, e))
      .. "*2:" .. dollar(ns) .. dollar(value)
    remember(k[5], k[6], a[11], a[12], text)
    return text
  end
end

-- KEYS: events, marks, replies, replies_old.
-- ARGV: at, run, effect, kind, namespace, value, lane, number.
local function claim_for(fewest, bare)
  local comp = bare and plain or comp
  return function(k, a)
    local at = a[1]
    local wid = comp(a[2]) .. comp(a[3])
    local mark = redis.call("HGET", k[2], wid)
    local sp = mark and string.find(mark, " ", 1, true)
    if not sp then
      error("lean: no claim held")
    end
    local eid = string.sub(mark, sp + 1)
    local raw = redis.call("HGET", k[1], eid)
    local w = #wid
    if not raw or string.sub(raw, 1, 1) ~= "H" or string.sub(raw, 22, 21 + w) ~= wid then
      return redis.error_reply("CORRUPT mark names a row not held for its wait")
    end
    local nl, kc = string.find(raw, "\n", 1, true), comp(a[4])
    local found = string.find(raw, comp(a[5]) .. comp(a[6]), 39 + w + #kc, true)
    local erased = string.sub(raw, 2, 2) ~= "-"
    if erased or string.sub(raw, 39 + w, 38 + w + #kc) ~= kc or not found or found > nl then
      error("lean: the claim is not eligible for the wait")
    end
    if bare then -- the row as read, which the client splits
      redis.call("HSET", k[2], wid, at .. " " .. eid)
      remember(k[3], k[4], a[7], a[8], "H " .. at .. " " .. eid)
      return { "HIT", at, eid, raw }
    end
    local head = string.sub(raw, 1, 21 + w) .. instant(at) .. string.sub(raw, 38 + w, nl)
    local payload = string.sub(raw, nl + 1)
    if not fewest then
      redis.call("HSET", k[1], eid, head .. payload)
    end
    redis.call("HSET", k[2], wid, at .. " " .. eid)
    local row, has = eid .. head, payload ~= "" and "1" or "0"
    local withheld = has == "1" and "$1:R$0:" or "$1:0$0:"
    remember(k[3], k[4], a[7], a[8], "*5:$3:HIT" .. dollar(at) .. dollar(row) .. withheld)
    return { "HIT", at, row, has, payload }
  end
end

-- The order bucket's state of a retirement that reads the geometry and the
-- index (the library's commands): the bucket's start, the span and the newest
-- start; an error where the call did not name that bucket or it has a left list.
local function order_read(k, created)
  local g = redis.call("HMGET", k[8], "order", "wait")
  local span, newest = string.match(g[1] or "", "^(%d+) (%d+) %d+$")
  local start = newest
  if not newest or tonumber(newest) > tonumber(created) then
    start = redis.call("ZREVRANGEBYLEX", k[5], "[" .. created, "-", "LIMIT", "0", "1")[1]
  end
  if not start or k[12] ~= string.sub(k[8], 1, -8) .. "wait:order:" .. start then
    error("lean: an order bucket the client did not name")
  end
  if redis.call("HMGET", k[4], start, "g" .. start)[2] then
    error("lean: a left list")
  end
  return g[2] or "0 0", start, span, newest
end

-- KEYS: events, consumed, wait_count, wait_order, wait_order_index, marks,
-- mark_index, geometry, replies, replies_old, the wait bucket of the run,
-- the order bucket of the wait's registration.
-- ARGV: run, effect, the wait geometry (not with the fewest commands), lane, number.
local function unsubscribe(fewest, bare)
  local comp = bare and plain or comp
  return function(k, a)
    local wid, n = comp(a[1]) .. comp(a[2]), #a
    local m = redis.call("HGET", k[11], wid)
    if not m then
      error("lean: a wait not registered, or its bucket not current")
    end
    local mark = redis.call("HGET", k[6], wid)
    -- Its order bucket: the one holding its instant (its one key row's, the
    -- row's end), or the one named, proven by the member taken from it.
    local start, span, newest, geometry
    if fewest then
      start = string.sub(k[12], -16)
    else
      geometry, start, span, newest = order_read(k, string.sub(m, -16))
      if geometry ~= a[3] then
        return { "BUCKETS" }
      end
    end
    local sp = mark and string.find(mark, " ", 1, true)
    local eid, raw
    if sp then
      eid = string.sub(mark, sp + 1)
      raw = redis.call("HGET", k[1], eid)
      if not raw or string.sub(raw, 1, 1) ~= "H" or string.sub(raw, 22, 21 + #wid) ~= wid then
        return redis.error_reply("CORRUPT mark names a row not held for its wait")
      end
    end
    if redis.call("ZREM", k[12], wid) == 0 and fewest then
      error("lean: not in the order bucket named")
    end
    if mark then
      redis.call("HDEL", k[6], wid)
      redis.call("ZREM", k[7], "L" .. wid, "B" .. wid, "S" .. wid)
    end
    if redis.call("HINCRBY", k[4], start, "-1") <= 0 then
      redis.call("HDEL", k[4], start)
      redis.call("ZREM", k[5], start)
      if fewest then
        span, newest = string.match(redis.call("HGET", k[8], "order") or "", "^(%d+) (%d+) %d+$")
      end
      if start == newest then
        local before = redis.call("ZREVRANGEBYLEX", k[5], "(~", "-", "LIMIT", "0", "1")[1]
        local order = before and (span .. " " .. before .. " " .. start) or span
        redis.call("HSET", k[8], "order", order)
      end
    end
    redis.call("HDEL", k[11], wid)
    redis.call("INCRBY", k[3], "-1")
    if raw then
      redis.call("HSET", k[1], eid, "C" .. string.sub(raw, 2, string.find(raw, "\n", 1, true)))
      redis.call("ZADD", k[2], "0", string.sub(raw, 5, 20) .. eid)
    end
    remember(k[9], k[10], a[n - 1], a[n], "*1:$2:OK")
    return redis.status_reply("OK")
  end
end

-- A timer's life on the library's layout (lua/_lib/timers.lua): arm, a step
-- of claim_due, disarm; the same commands, keys as few as the path needs.

-- KEYS: timer_walk, geometry, the timer bucket of the run, wake, replies,
-- replies_old. ARGV: run, effect, fire_at, step, phase, case, the timer
-- buckets' geometry, lane, number.
local function arm(k, a)
  local g = redis.call("HGET", k[2], "timer") or "0 0"
  if g ~= a[7] then
    return { "BUCKETS", g }
  end
  local tid = comp(a[1]) .. comp(a[2])
  local attrs = a[4] .. (a[5] == "compensating" and "c" or "f") .. a[6]
  if redis.call("HSETNX", k[3], tid, attrs) == 0 then
    remember(k[5], k[6], a[8], a[9], "*1:$4:SEEN")
    return "SEEN"
  end
  local m = tid .. attrs
  redis.call("ZADD", k[1], a[3], m)
  if redis.call("ZRANK", k[1], m) == 0 then
    redis.call("LPUSH", k[4], "t")
    redis.call("LTRIM", k[4], "0", "1")
  end
  if redis.call("HLEN", k[3]) > 48 then
    error("lean: a bucket to split")
  end
  remember(k[5], k[6], a[8], a[9], "*1:$3:NEW")
  return "NEW"
end

-- One step of claim_due, its reply text as the library's.
-- KEYS: seals, timer_walk, timer_held, timer_held_fire, timer_claims,
-- replies, replies_old. ARGV: now, room, lease, budget, skip, lane, number.
local function claim_due(k, a)
  local now, room, lease, budget, skip = a[1], tonumber(a[2]), a[3], a[4], tonumber(a[5])
  if redis.call("ZRANGEBYSCORE", k[3], "-inf", now, "LIMIT", "0", budget)[1] then
    error("lean: a lapsed lease")
  end
  local reach = math.min(tonumber(budget), room)
  local walked = redis.call("ZRANGEBYSCORE", k[2], "-inf", now, "WITHSCORES", "LIMIT", skip, reach)
  local n = #walked / 2
  local tids, runs = {}, {}
  for i = 1, n do
    local m = walked[2 * i - 1]
    local first = string.find(m, TERM, 1, true)
    local second = first and string.find(m, TERM, first + 1, true)
    if not second or not string.find(m, "^%d+[fc]", second + 1) or string.find(m, "!", 1, true) then
      error("lean: a member that needs escapes, or not a member")
    end
    tids[i], runs[i] = string.sub(m, 1, second), string.sub(m, 1, first - 1)
  end
  local sealed = n > 0 and redis.call("HMGET", k[1], unpack(runs)) or {}
  local last = n > 0 and redis.call("HMGET", k[5], unpack(tids)) or {}
  local now_n = tonumber(now)
  local expiry, claim = string.format("%.0f", now_n + tonumber(lease)), now .. " " .. lease .. " "
  local text, t, taken, held, fires, claims = { false }, 1, {}, {}, {}, {}
  for i = 1, n do
    if sealed[i] then
      error("lean: a sealed run's timer")
    end
    local m, fire, count, live = walked[2 * i - 1], walked[2 * i], "1", false
    if last[i] then
      local at, l, c = string.match(last[i], "^(%-?%d+) (%d+) (%d+)$")
      if not at then
        return redis.error_reply("CORRUPT bad claim")
      end
      live, count = tonumber(at) + tonumber(l) > now_n, string.format("%d", tonumber(c) + 1)
    end
    if live then
      skip = skip + 1
    else
      local j = 2 * #taken
      taken[#taken + 1] = m
      held[j + 1], held[j + 2] = expiry, m
      fires[j + 1], fires[j + 2] = fire, m
      claims[j + 1], claims[j + 2] = tids[i], claim .. count
      text[t + 1], text[t + 2], text[t + 3] = LENGTH[#m] or ("$" .. #m .. ":"), m, LENGTH[#fire]
      text[t + 4], text[t + 5], text[t + 6] = fire, LENGTH[#count], count
      t = t + 6
    end
  end
  if #taken > 0 then
    redis.call("ZREM", k[2], unpack(taken))
    redis.call("ZADD", k[3], unpack(held))
    redis.call("ZADD", k[4], unpack(fires))
    redis.call("HSET", k[5], unpack(claims))
  end
  local more = n == reach and #taken < room and "1" or "0"
  local skipped = string.format("%d", skip)
  local head = "*" .. string.format("%d", 5 + #taken * 3) .. ":$2:OK" .. dollar(now)
  text[1] = head .. dollar(more) .. "$0:" .. dollar(skipped)
  local out = table.concat(text)
  remember(k[6], k[7], a[6], a[7], out)
  return out
end

-- KEYS: timer_walk, timer_held, timer_held_fire, timer_claims, the timer
-- bucket of the run, replies, replies_old. ARGV: run, effect, lane, number.
local function disarm(k, a)
  local tid = comp(a[1]) .. comp(a[2])
  local attrs = redis.call("HGET", k[5], tid)
  if not attrs or not string.find(attrs, "^%d+[fc]") then
    error("lean: no timer, or not its attributes")
  end
  local m = tid .. attrs
  if redis.call("ZREM", k[2], m) == 1 then
    redis.call("ZREM", k[3], m)
  elseif redis.call("ZREM", k[1], m) == 0 then
    return redis.error_reply("CORRUPT a timer's row is in no walk")
  end
  redis.call("HDEL", k[5], tid)
  redis.call("HDEL", k[4], tid)
  remember(k[6], k[7], a[3], a[4], "*1:$7:REMOVED")
  return "REMOVED"
end

redis.register_function("lean_arm", arm)
redis.register_function("lean_claim_due", claim_due)
redis.register_function("lean_disarm", disarm)

redis.register_function("lean_deliver", deliver(false))
redis.register_function("lean_claim_for", claim_for(false))
redis.register_function("lean_unsubscribe", unsubscribe(false))
redis.register_function("lean_fewest_deliver", deliver(true))
redis.register_function("lean_fewest_claim_for", claim_for(true))
redis.register_function("lean_fewest_unsubscribe", unsubscribe(true))
redis.register_function("lean_bare_deliver", deliver(true, true))
redis.register_function("lean_bare_claim_for", claim_for(true, true))
redis.register_function("lean_bare_unsubscribe", unsubscribe(true, true))
"""


#: The lean calls' one lane, as a store calling one at a time keeps one.
LANE = os.urandom(8).hex()
_NUMBERS = itertools.count(1)


def token() -> list[str]:
    """A call token as a store makes one for a call's first send: its lane and its
    number there, marked as a first send."""
    return [LANE, f"{FIRST_SEND}{next(_NUMBERS)}"]


#: The sets of lean functions by their prefix: the library's commands, the fewest
#: commands, the fewest commands with the strings from the client.
MODES = {"lean": "lean_", "fewest": "lean_fewest_", "bare": "lean_bare_"}


class Lean:
    """The lean functions' calls for one tenant's event lives, each call's keys and
    arguments computed beforehand from the geometry stored then; ``mode`` names the
    set of functions called (``MODES``)."""

    def __init__(self, client: redis.Redis, tenant: str, mode: str = "lean") -> None:
        self.client, self.keys = client, TenantKeys(tenant)
        self.fewest, self.prefix = mode != "lean", MODES[mode]

    def geometry(self, family: str) -> Geometry:
        return Geometry.parse(self.client.hget(self.keys.key("geometry"), family) or "0 0")

    def deliver(self, i: int, n: int) -> Callable[[], Any]:
        k = self.keys.key
        key_g, wait_g = self.geometry("key"), self.geometry("wait")
        calls = []
        for j in range(i, i + n):
            e, w = event(j), wait(j)
            key = e.correlation[0]
            h = key_hash(e.kind, key.namespace, key.value)
            keys = [k("events"), k("marks"), k("mark_index"), k("geometry"), k("replies")]
            keys += [k("replies_old"), self.keys.key_bucket(key_g.bucket_of(h))]
            keys.append(self.keys.wait_bucket(wait_g.bucket(w.run)))
            args = [str(ms(j)), e.source, e.id, e.kind, key.namespace, key.value]
            args += [payload_text(e.payload, DEFAULT_MAX_PAYLOAD), f"{h:08x}", key_g.text()]
            args += [wait_g.text(), *token()]
            calls.append((keys, args))
        f = self.prefix + "deliver"
        return lambda: [self.client.fcall(f, len(ks), *ks, *a) for ks, a in calls]

    def claim_for(self, i: int, n: int) -> Callable[[], Any]:
        k = self.keys.key
        keys = [k("events"), k("marks"), k("replies"), k("replies_old")]
        calls = []
        for j in range(i, i + n):
            w, key = wait(j), wait(j).correlation[0]
            calls.append([str(ms(j)), w.run, w.effect, w.kind, key.namespace, key.value, *token()])
        f = self.prefix + "claim_for"
        return lambda: [self.client.fcall(f, 4, *keys, *a) for a in calls]

    def unsubscribe(self, i: int, n: int) -> Callable[[], Any]:
        k = self.keys.key
        wait_g = self.geometry("wait")
        fixed = [k(role) for role in ("events", "consumed", "wait_count", "wait_order")]
        fixed += [k(role) for role in ("wait_order_index", "marks", "mark_index", "geometry")]
        fixed += [k("replies"), k("replies_old")]
        calls = []
        for j in range(i, i + n):
            w = wait(j)
            row = self.client.hget(self.keys.wait_bucket(wait_g.bucket(w.run)), wid(w.run))
            created = (row or b"")[-16:].decode()
            start = self.client.zrevrangebylex(
                k("wait_order_index"), f"[{created}", "-", start=0, num=1
            )
            order = self.keys.order_bucket(start[0].decode()) if start else ""
            keys = [*fixed, self.keys.wait_bucket(wait_g.bucket(w.run)), order]
            geometry = [] if self.fewest else [wait_g.text()]
            calls.append((keys, [w.run, w.effect, *geometry, *token()]))
        f = self.prefix + "unsubscribe"
        return lambda: [self.client.fcall(f, 12, *ks, *a) for ks, a in calls]


class LeanTimers:
    """The lean timer functions' calls for one tenant's timers (a timer's life:
    ``lean_arm``, ``lean_claim_due``, ``lean_disarm``), each call's keys and arguments
    computed beforehand from the timer buckets' geometry stored then."""

    def __init__(self, client: redis.Redis, tenant: str) -> None:
        self.client, self.keys = client, TenantKeys(tenant)

    def geometry(self) -> Geometry:
        return Geometry.parse(self.client.hget(self.keys.key("geometry"), "timer") or "0 0")

    def arm(self, timers: Sequence[Timer]) -> Callable[[], Any]:
        k, g = self.keys.key, self.geometry()
        calls = []
        for t in timers:
            keys = [k("timer_walk"), k("geometry"), self.keys.timer_bucket(t.run, g)]
            keys += [k("wake"), k("replies"), k("replies_old")]
            args = [t.run, t.effect, str(instant("fire_at", t.fire_at)), str(t.step)]
            args += [t.phase.value, t.case or "", g.text(), *token()]
            calls.append((keys, args))
        return lambda: [self.client.fcall("lean_arm", 6, *ks, *a) for ks, a in calls]

    def claim_all(self, now: int, limit: int = 128, lease: int = DEFAULT_TIMER_LEASE_MS) -> None:
        """Every timer due at ``now`` claimed in pages of ``limit``, each page in
        steps of ``TIMER_SCAN`` entries, as the store's ``claim_due`` loop claims
        them, until a page comes back empty."""
        roles = ("seals", "timer_walk", "timer_held", "timer_held_fire", "timer_claims")
        keys = [self.keys.key(role) for role in (*roles, "replies", "replies_old")]
        while True:
            claimed, skip, more = 0, "0", True
            while claimed < limit and more:
                args = [now, limit - claimed, lease, TIMER_SCAN, skip, *token()]
                reply = self.client.fcall("lean_claim_due", 7, *keys, *args)
                values = replayed(reply)
                skip, more = values[4].decode(), values[2] == b"1"
                claimed += (len(values) - 5) // 3
            if claimed == 0:
                return

    def disarm(self, pairs: Sequence[tuple[str, str]]) -> Callable[[], Any]:
        k, g = self.keys.key, self.geometry()
        roles = ("timer_walk", "timer_held", "timer_held_fire", "timer_claims")
        fixed = [k(role) for role in roles]
        calls = []
        for run, effect in pairs:
            keys = [*fixed, self.keys.timer_bucket(run, g), k("replies"), k("replies_old")]
            calls.append((keys, [run, effect, *token()]))
        return lambda: [self.client.fcall("lean_disarm", 7, *ks, *a) for ks, a in calls]


def life_timers(base: int, n: int) -> list[Timer]:
    """The timers of a timer's life, due at ``at(base + n)``: n of them over 50 runs."""
    return [Timer(f"c-{i % 50}", f"lt-{i}", at(i)) for i in range(base, base + n)]


def timer_lives(
    store: RedisStore, lean: LeanTimers, base: int, n: int
) -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], Callable[[], Any]]]]:
    """A timer's life for ``n`` timers (``life_timers``) through the library's store,
    each step a batch, and through the lean functions, each step what computes
    its calls (what the store does in Python, reading the geometry stored then)
    and answers the batch that sends them."""
    timers = life_timers(base, n)
    now = at(base + n)
    pairs = [(t.run, t.effect) for t in timers]

    def claim_all() -> None:
        while store.timers.claim_due(now=now, limit=128):
            pass

    def lean_claim_all() -> None:
        lean.claim_all(ms(base + n))

    library = {
        "arm": lambda: [store.timers.arm(t) for t in timers],
        "claim_due": claim_all,
        "disarm": lambda: [store.timers.disarm(run, effect) for run, effect in pairs],
    }
    return library, {
        "arm": lambda: lean.arm(timers),
        "claim_due": lambda: lean_claim_all,
        "disarm": lambda: lean.disarm(pairs),
    }


def ms(j: int) -> int:
    """The instant of the j-th item, ms since the epoch."""
    return int(at(j).timestamp() * 1000)


def wid(run: str, effect: str = "await-payment") -> str:
    return tuple_member([run, effect]).decode()


def subscribed(client: redis.Redis, tenant: str, base: int, n: int) -> RedisStore:
    """A store of ``tenant`` with the waits of items base.. base + n registered."""
    store = RedisStore(client, tenant=tenant)
    for j in range(base, base + n):
        store.events.subscribe(wait(j), at=at(j))
    return store


def library_life(store: RedisStore, base: int, n: int) -> dict[str, Callable[[], Any]]:
    """The same lives through the library's store."""
    ev = store.events
    return {
        "deliver": lambda: [ev.deliver(event(j), at=at(j)) for j in range(base, base + n)],
        "claim_for": lambda: [ev.claim_for(wait(j), at=at(j)) for j in range(base, base + n)],
        "unsubscribe": lambda: [
            ev.unsubscribe(wait(j).run, wait(j).effect) for j in range(base, base + n)
        ],
    }


def lean_life(
    client: redis.Redis, tenant: str, base: int, n: int, mode: str = "lean"
) -> dict[str, Callable[[], Callable[[], Any]]]:
    """The lives through a set of lean functions (``MODES``): for each step, what
    computes its calls (what the store does in Python, reading the geometry
    stored then) and answers the batch that sends them."""
    lean = Lean(client, tenant, mode)
    return {
        "deliver": lambda: lean.deliver(base, n),
        "claim_for": lambda: lean.claim_for(base, n),
        "unsubscribe": lambda: lean.unsubscribe(base, n),
    }


def lives(client: redis.Redis, base: int, n: int) -> list[dict[str, Callable[[], Any]]]:
    """The lives of items base.. base + n through the library (tenant ``lib``) and each
    set of lean functions (a tenant named by its mode, ``MODES``), each tenant's
    waits registered first by the library (a store of its own, whose lane keeps
    its last reply as the lean calls' lane keeps theirs); the lean steps compute
    their calls as they start."""
    subscribed(client, "lib", base, n)
    out = [library_life(RedisStore(client, tenant="lib"), base, n)]
    for mode in MODES:
        subscribed(client, mode, base, n)
        lean = lean_life(client, mode, base, n, mode)
        out.append({step: lambda make=make: make()() for step, make in lean.items()})
    return out


def tenant_state(client: redis.Redis, tenant: str) -> dict[str, Any]:
    """Every key of the tenant by its suffix, with its contents; the remembered
    replies by text (their lanes and numbers differ from run to run), without
    their count of bytes, which each library adds to the field when its own Lua
    state holds 16 KiB (the library registers the waits of both tenants)."""
    prefix = f"agentplane:{{{tenant}}}:"
    out: dict[str, Any] = {}
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        suffix = key.decode()[len(prefix) :]
        kind = client.type(key).decode()
        if kind == "hash":
            value: Any = client.hgetall(key)
            if suffix == "reply":
                value = sorted(v.split(b" ", 1)[1] for f, v in value.items() if f != b"")
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "string":
            value = client.get(key)
        else:
            value = kind
        out[suffix] = value
    return out


def equivalent(client: redis.Redis, n: int, base: int = 7 * 10**6) -> dict[str, list[str]]:
    """The lives of ``n`` items run through the library and each set of lean
    functions (``MODES``), after the same waits were registered: for each set,
    the keys whose contents differ from the library's (none, when its functions
    write what the library does; the remembered replies of those with the
    strings from the client hold the rows they read, not the library's text, and
    are left out)."""
    client.function_load(LEAN, replace=True)
    ran = lives(client, base, n)
    for step in ("deliver", "claim_for", "unsubscribe"):
        for life in ran:
            life[step]()
    a = tenant_state(client, "lib")
    out = {}
    for mode in MODES:
        b = tenant_state(client, mode)
        differ = (s for s in a.keys() | b.keys() if a.get(s) != b.get(s))
        out[mode] = sorted(s for s in differ if not (mode == "bare" and s == "reply"))
    return out


def timers_equivalent(client: redis.Redis, n: int, base: int = 7 * 10**6) -> list[str]:
    """A timer's life for ``n`` timers run through the library (tenant ``lib-timers``)
    and through the lean functions (``lean-timers``): after each step, the keys
    whose contents differ (none, when the lean functions write what the library
    does)."""
    client.function_load(LEAN, replace=True)
    store = RedisStore(client, tenant="lib-timers")
    library, lean = timer_lives(store, LeanTimers(client, "lean-timers"), base, n)
    differ: set[str] = set()
    for step in ("arm", "claim_due", "disarm"):
        library[step]()
        lean[step]()()
        a, b = tenant_state(client, "lib-timers"), tenant_state(client, "lean-timers")
        differ.update(f"{s} after {step}" for s in a.keys() | b.keys() if a.get(s) != b.get(s))
    return sorted(differ)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    parser.add_argument("--calls", type=int, default=256)
    args = parser.parse_args()
    n = args.calls
    with Server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        for tenant, differ in equivalent(client, n).items():
            print(f"{tenant}: keys that differ after {n} lives each: {', '.join(differ) or 'none'}")
        differ = timers_equivalent(client, n)
        print(f"timers: keys that differ after {n} lives: {', '.join(differ) or 'none'}")
        client.flushall()
        client.function_load(LEAN, replace=True)
        client.config_set("slowlog-log-slower-than", -1)
        ran = lives(client, 8 * 10**6, n)
        print("\n| server time per call, mean µs | library | lean | fewest | bare |")
        print("|---|---:|---:|---:|---:|")
        for step in ("deliver", "claim_for", "unsubscribe"):
            row = [server_mean(client, "fcall", life[step])[0] for life in ran]
            print(f"| {step} | " + " | ".join(f"{t:.1f}" for t in row) + " |")
        library, lean = timer_lives(
            RedisStore(client, tenant="lib-timers"), LeanTimers(client, "lean-timers"), 0, n
        )
        print("\n| server time per call, mean µs | library | lean |\n|---|---:|---:|")
        for step in ("arm", "claim_due", "disarm"):
            row = [server_mean(client, "fcall", library[step])[0]]
            row.append(server_mean(client, "fcall", lean[step]())[0])
            name = f"{step} (a step of {TIMER_SCAN} timers)" if step == "claim_due" else step
            print(f"| {name} | " + " | ".join(f"{t:.1f}" for t in row) + " |")


if __name__ == "__main__":
    main()
