-- Event rows and their indexes.
--
-- Row fields (netstrings): tag "e1", state (live | held | consumed | dead),
-- source, id, kind, received_at, minter actor, minter basis, holder run,
-- holder effect, claimed_at, dead reason, erased (0/1), targeted (0/1), then
-- the correlation keys as namespace, value pairs in first-given order, then
-- the payload's JSON text ("" for null: consumed and erased rows). Replies
-- carry a row without its payload field and the payload beside it
-- (event_reply), so that a remembered reply can withhold it.
-- A live row sits in the live indexes; a held row is named by its wait's mark
-- (waits.lua); a consumed or dead row sits in its retention index (consumed, dead).
-- A claim ends with its wait's mark: whoever sheds, releases or kills a held
-- row clears the holder's mark in the same call.

local E_STATE, E_SOURCE, E_ID, E_KIND, E_RECEIVED = 2, 3, 4, 5, 6
local E_ACTOR, E_BASIS, E_RUN, E_EFFECT, E_CLAIMED = 7, 8, 9, 10, 11
local E_REASON, E_ERASED, E_TARGETED, E_KEYS = 12, 13, 14, 15
local TARGETED_REASON = "the run it was addressed to concluded without consuming it"

local function event_fault(f)
  if #f < 15 or (#f - 15) % 2 ~= 0 then
    return "wrong number of fields"
  end
  if f[1] ~= "e1" then
    return "unknown row tag"
  end
  if f[E_SOURCE] == "" or f[E_ID] == "" or f[E_KIND] == "" then
    return "empty identifier"
  end
  if not is_instant(f[E_RECEIVED]) then
    return "received_at is not an instant"
  end
  if (f[E_ACTOR] == "") ~= (f[E_BASIS] == "") then
    return "half an operator"
  end
  if (f[E_ERASED] ~= "0" and f[E_ERASED] ~= "1") or (f[E_TARGETED] ~= "0" and f[E_TARGETED] ~= "1") then
    return "bad mark"
  end
  for i = E_KEYS, #f - 1 do
    if f[i] == "" then
      return "empty correlation key"
    end
  end
  if f[#f] ~= "" and (f[E_STATE] == "consumed" or f[E_ERASED] == "1") then
    return "a payload kept past its row's consumption or erasure"
  end
  local state, claimed = f[E_STATE], f[E_RUN] ~= "" or f[E_EFFECT] ~= "" or f[E_CLAIMED] ~= ""
  if state == "live" or state == "dead" then
    if claimed then
      return state .. " row with a claim"
    end
    if state == "live" and (f[E_ERASED] == "1" or f[E_TARGETED] == "1") then
      return "live row erased or targeted"
    end
  elseif state == "held" or state == "consumed" then
    if f[E_RUN] == "" or f[E_EFFECT] == "" or not is_instant(f[E_CLAIMED]) then
      return state .. " row without a whole claim"
    end
    if state == "held" and f[E_ERASED] == "1" then
      return "held row erased"
    end
  else
    return "unknown state"
  end
  return nil
end

-- An event row's fourteen fixed fields, when none holds a comma (the usual
-- row): one match reads them with their lengths, which are checked, for a
-- fraction of reading them field by field (and where claimed_at sits).
local EVENT_HEAD = "^(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),"
  .. "(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),()(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),(%d+:)([^,]*),()"
-- Then one correlation key and the payload's length, the usual rest.
local EVENT_ONE_KEY = "^(%d+:)([^,]*),(%d+:)([^,]*),(%d+):()"

-- A stored row's fields (unpack_row's), or nil when it is not a row. A usual
-- row's table also keeps the stored text (raw) with where claimed_at's field
-- (at_claimed) and the payload's (at_payload) start, which event_restamp and
-- shed patch instead of writing the row anew.
local function event_fields(raw)
  local match, L = string.match, LENGTH
  local a1, f1, a2, f2, a3, f3, a4, f4, a5, f5, a6, f6, a7, f7, a8, f8, a9, f9, a10, f10, p11, a11, f11, a12, f12, a13, f13, a14, f14, pos =
    match(raw, EVENT_HEAD)
  if
    not pos
    or (L[#f1] or length_colon(#f1)) ~= a1 or (L[#f2] or length_colon(#f2)) ~= a2
    or (L[#f3] or length_colon(#f3)) ~= a3 or (L[#f4] or length_colon(#f4)) ~= a4
    or (L[#f5] or length_colon(#f5)) ~= a5 or (L[#f6] or length_colon(#f6)) ~= a6
    or (L[#f7] or length_colon(#f7)) ~= a7 or (L[#f8] or length_colon(#f8)) ~= a8
    or (L[#f9] or length_colon(#f9)) ~= a9 or (L[#f10] or length_colon(#f10)) ~= a10
    or (L[#f11] or length_colon(#f11)) ~= a11 or (L[#f12] or length_colon(#f12)) ~= a12
    or (L[#f13] or length_colon(#f13)) ~= a13 or (L[#f14] or length_colon(#f14)) ~= a14
  then
    return unpack_row(raw)
  end
  local b1, ns, b2, value, len, at = match(raw, EVENT_ONE_KEY, pos)
  if at and (L[#ns] or length_colon(#ns)) == b1 and (L[#value] or length_colon(#value)) == b2 then
    local stop = at + tonumber(len)
    if stop == #raw and string.byte(raw, stop) == 44 and (len == "0" or string.byte(len) ~= 48) then
      return {
        f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, ns, value, string.sub(raw, at, stop - 1),
        raw = raw, at_claimed = p11, at_payload = at - #len - 1,
      }
    end
  end
  return unpack_row(raw, { f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14 }, pos, 14)
end

-- A stored row's fields, checked (corruption aborts the script).
local function event_parse(eid, raw)
  local f = event_fields(raw)
  local fault = "not a row"
  if f then
    fault = event_fault(f)
  end
  if fault then
    corrupt("event", eid, fault)
  end
  return f
end

-- The row of eid, checked, or nil when there is none.
local function event_read(eid)
  local raw = redis.call("HGET", K.events, eid)
  if not raw then
    return nil
  end
  return event_parse(eid, raw)
end

-- An event row's text without its payload field (the reply's row): pack's,
-- its fourteen fixed fields as one concatenation.
local function event_base(f)
  local L, n = LENGTH, #f - 1
  if n < 14 then
    local head = {}
    for x = 1, n do
      head[x] = f[x]
    end
    return pack(head)
  end
  local a, b, c, d, e, g, h = f[1], f[2], f[3], f[4], f[5], f[6], f[7]
  local i, j, k, l, m, o, q = f[8], f[9], f[10], f[11], f[12], f[13], f[14]
  local row = (L[#a] or length_colon(#a)) .. a .. "," .. (L[#b] or length_colon(#b)) .. b .. ","
    .. (L[#c] or length_colon(#c)) .. c .. "," .. (L[#d] or length_colon(#d)) .. d .. ","
    .. (L[#e] or length_colon(#e)) .. e .. "," .. (L[#g] or length_colon(#g)) .. g .. ","
    .. (L[#h] or length_colon(#h)) .. h .. "," .. (L[#i] or length_colon(#i)) .. i .. ","
    .. (L[#j] or length_colon(#j)) .. j .. "," .. (L[#k] or length_colon(#k)) .. k .. ","
    .. (L[#l] or length_colon(#l)) .. l .. "," .. (L[#m] or length_colon(#m)) .. m .. ","
    .. (L[#o] or length_colon(#o)) .. o .. "," .. (L[#q] or length_colon(#q)) .. q .. ","
  if n == 16 then -- one correlation key, the usual
    local ns, value = f[15], f[16]
    return row .. (L[#ns] or length_colon(#ns)) .. ns .. ","
      .. (L[#value] or length_colon(#value)) .. value .. ","
  elseif n > 14 then
    local rest = {}
    for x = 15, n do
      rest[x - 14] = f[x]
    end
    return row .. pack(rest)
  end
  return row
end

-- The stored text of a row whose event_base is base.
local function event_stored(f, base)
  local payload = f[#f]
  return base .. (LENGTH[#payload] or length_colon(#payload)) .. payload .. ","
end

-- An event row's stored text (pack's bytes, for any fields).
local function event_pack(f)
  if #f < 15 then
    return pack(f)
  end
  return event_stored(f, event_base(f))
end

-- Writes the row; returns it packed without its payload (event_base).
local function event_write(eid, f)
  f.raw = nil -- no longer the stored text
  local base = event_base(f)
  redis.call("HSET", K.events, eid, event_stored(f, base))
  return base
end

-- {row, has payload, payload}: row is event_base(f), when the caller has it
-- already. A reply holding a payload is remembered with it withheld
-- (core.lua, remember).
local function event_reply(eid, f, row)
  row = row or event_base(f)
  local payload = f[#f]
  if payload ~= "" then
    local triple = { row, "1", payload }
    WITHHELD[#WITHHELD + 1] = { triple, 2 }
    return triple
  end
  return { row, "0", "" }
end

-- The row's correlation keys, encoded "ns value", in first-given order.
local function event_nv(f)
  local out = {}
  for i = E_KEYS, #f - 1, 2 do
    out[#out + 1] = enc_pair(f[i], f[i + 1])
  end
  return out
end

local function event_has_key(f, nv_set)
  for _, nv in ipairs(event_nv(f)) do
    if nv_set[nv] then
      return true
    end
  end
  return false
end

-- Collects the live index entries of rows, to add or remove them together.
local function live_entries()
  return { live = {}, by_key = {} }
end

local function live_collect(acc, eid, f)
  local at = instant_key_of(f[E_RECEIVED])
  local kind, source = enc(f[E_KIND]), enc(f[E_SOURCE])
  acc.live[#acc.live + 1] = at .. eid
  for _, nv in ipairs(event_nv(f)) do
    acc.by_key[#acc.by_key + 1] = kind .. nv .. source .. at .. eid
  end
end

local function live_apply(acc, add)
  local apply = add and zadd_all or zrem_all
  apply(K.live, acc.live)
  apply(K.live_by_key, acc.by_key)
end

-- Adds (add = true) or removes the live index entries of one row, one command
-- per entry (a row has one key, or a few); nv_list: its keys encoded, when
-- the caller has them.
local function live_index(eid, f, add, nv_list)
  local kind, source = enc(f[E_KIND]), enc(f[E_SOURCE])
  local tail = instant_key_of(f[E_RECEIVED]) .. eid
  nv_list = nv_list or event_nv(f)
  if add then
    redis.call("ZADD", K.live, "0", tail)
    for _, nv in ipairs(nv_list) do
      redis.call("ZADD", K.live_by_key, "0", kind .. nv .. source .. tail)
    end
  else
    redis.call("ZREM", K.live, tail)
    for _, nv in ipairs(nv_list) do
      redis.call("ZREM", K.live_by_key, kind .. nv .. source .. tail)
    end
  end
end

local function new_event_row(source, id, kind, at, actor, basis, keys_raw, state, run, effect, targeted, payload)
  local f = { "e1", state, source, id, kind, decimal(at), actor, basis, run, effect, "", "", "0", targeted }
  if state == "held" then
    f[E_CLAIMED] = decimal(at)
  end
  local n = #keys_raw
  for i = 1, n do
    f[E_KEYS + i - 1] = keys_raw[i]
  end
  f[E_KEYS + n] = payload
  return f
end

-- Holds the row for wait (run, effect) with claimed_at = at; returns the row
-- packed. The caller parks the wait holding it (park's held).
local function hold(eid, f, run, effect, at)
  local raw = f[E_STATE] == "live" and f.raw
  if f[E_STATE] == "live" then
    live_index(eid, f, false)
  end
  local claimed = decimal(at)
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED] = "held", run, effect, claimed
  -- A live row as event_fields read it, unchanged, is patched: its state, and
  -- its holder and claimed_at, the three empty fields before its reason (a
  -- read row is checked, so a live one begins "2:e1,4:live," and has no claim).
  if raw then
    local L, p = LENGTH, f.at_claimed
    local base = "2:e1,4:held," .. string.sub(raw, 13, p - 7) .. (L[#run] or length_colon(#run)) .. run .. ","
      .. (L[#effect] or length_colon(#effect)) .. effect .. "," .. (L[#claimed] or length_colon(#claimed)) .. claimed
      .. "," .. string.sub(raw, p + 3, f.at_payload - 1)
    redis.call("HSET", K.events, eid, base .. string.sub(raw, f.at_payload))
    f.raw = nil
    return base
  end
  return event_write(eid, f)
end

-- Sets the held row's claimed_at; returns its text without its payload
-- (event_write's). A row as event_fields read it, unchanged, is patched where
-- the field sits.
local function event_restamp(eid, f, claimed)
  local raw, at = f.raw, f.at_claimed
  local old = f[E_CLAIMED]
  f[E_CLAIMED] = claimed
  if not raw then
    return event_write(eid, f)
  end
  local rest = at + #(LENGTH[#old] or length_colon(#old)) + #old -- the field's comma
  local head = string.sub(raw, 1, at - 1) .. (LENGTH[#claimed] or length_colon(#claimed)) .. claimed
  local stored = head .. string.sub(raw, rest)
  redis.call("HSET", K.events, eid, stored)
  f.raw = nil
  return string.sub(stored, 1, f.at_payload + #head - rest)
end

-- held -> consumed: the payload goes; identity, keys, minter and holder stay.
-- A held row as event_fields read it, unchanged, is patched: its state, and
-- its payload emptied.
local function shed(eid, f)
  local raw = f[E_STATE] == "held" and f.raw
  f[E_STATE], f[#f] = "consumed", ""
  if raw then
    redis.call("HSET", K.events, eid, "2:e1,8:consumed," .. string.sub(raw, 13, f.at_payload - 1) .. "0:,")
    f.raw = nil
  else
    event_write(eid, f)
  end
  redis.call("ZADD", K.consumed, "0", instant_key_of(f[E_RECEIVED]) .. eid)
end

-- held -> live at the original received_at, payload intact.
local function release(eid, f)
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED] = "live", "", "", ""
  event_write(eid, f)
  live_index(eid, f, true)
end

-- live or held -> dead with reason; a dead row has no claim.
local function kill(eid, f, reason)
  if f[E_STATE] == "live" then
    live_index(eid, f, false)
  end
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED], f[E_REASON] = "dead", "", "", "", reason
  event_write(eid, f)
  redis.call("ZADD", K.dead, "0", instant_key_of(f[E_RECEIVED]) .. eid)
end

-- How many of eids (at least one, when there are any) a step reads whole,
-- stopping once their rows come to budget bytes: a row holds its payload, so
-- a step of rows with the largest payloads reads a few of them, not all.
local function rows_within(eids, budget)
  local size = 0
  for i, eid in ipairs(eids) do
    if i > 1 and size >= budget then
      return i - 1
    end
    size = size + redis.call("HSTRLEN", K.events, eid)
  end
  return #eids
end

-- The eid at the end of an index member that ends "instant . eid".
local function eid_after(member, prefix_len)
  return string.sub(member, prefix_len + INSTANT_WIDTH + 1)
end

-- Rows a listing step returns, in bytes, at most (past its first row): a step of
-- payloads at max_payload_bytes stays within the contract's server time.
local LIST_BYTES = 1048576

-- A listing step's reply for members "instant . eid" of the index of rows in state:
-- {"OK" | "MORE", last member listed ("" for none), row as stored, ...}, the rows
-- read up to LIST_BYTES (MORE: stopped there; call again after the last). Read-only:
-- rows go back as stored, and Python decodes and checks every field.
local function listed_rows(members, state)
  local out, size = { "OK", "" }, 0
  for i, m in ipairs(members) do
    if size >= LIST_BYTES then
      out[1] = "MORE"
      break
    end
    local raw = redis.call("HGET", K.events, eid_after(m, 0))
    if not raw or row_state(raw) ~= state then
      corrupt("index", m, state .. " index names a row that is not " .. state)
    end
    out[i + 2] = raw
    out[2] = m
    size = size + #raw
  end
  return out
end

-- The oldest live row under base = enc(kind) . nv, from source (encoded) when
-- given, else from any: its eid and index member, or nil. The index holds
-- base . source . instant . eid, so the claim search with a sender reads its
-- first entry, and the one without reads the first entry of each source that
-- has live rows under the key, keeping the oldest by (received_at, source, id).
local function oldest_live(base, source)
  if source then
    local prefix = base .. source
    local m = with_prefix(K.live_by_key, prefix, 1)[1]
    return m and eid_after(m, #prefix), m
  end
  local best, best_at, best_eid
  local last = "(" .. base .. "\255"
  local m = with_prefix(K.live_by_key, base, 1)[1]
  while m do
    local stop = string.find(m, TERM, #base + 1, true)
    if not stop then
      corrupt("index", m, "bad live entry")
    end
    local at = tonumber(string.sub(m, stop + 1, stop + INSTANT_WIDTH))
    local eid = string.sub(m, stop + INSTANT_WIDTH + 1)
    if not best or at < best_at or (at == best_at and bytes_lt(eid, best_eid)) then
      best, best_at, best_eid = m, at, eid
    end
    m = redis.call("ZRANGEBYLEX", K.live_by_key, "(" .. string.sub(m, 1, stop) .. "\255", last, "LIMIT", "0", "1")[1]
  end
  return best_eid, best
end

-- ARGV[first ..]: source, id, kind, payload JSON, minter actor, minter basis,
-- then (namespace, value) pairs.
local function event_args(first)
  local args = ARGV
  local source, id = args[first], args[first + 1]
  local nv, keys = key_args(first + 6)
  return {
    source = source,
    id = id,
    kind = args[first + 2],
    payload = args[first + 3],
    actor = args[first + 4],
    basis = args[first + 5],
    eid = enc_pair(source, id),
    nv = nv,
    keys = keys,
  }
end

-- Inserts the event of event_args as a new row in state (live or held).
local function insert_event(a, at, state, run, effect, targeted)
  local f = new_event_row(a.source, a.id, a.kind, at, a.actor, a.basis, a.keys, state, run, effect, targeted, a.payload)
  event_write(a.eid, f)
  if state == "live" then
    live_index(a.eid, f, true, a.nv)
  end
  return f
end
