-- Event rows and their indexes.
--
-- A row is stored under its eid (K.events) as text:
--   <state><erased><targeted> <received_at> [<run> <effect> <claimed_at> ]<kind> <actor> <basis> <reason> [<namespace> <value> ]...\n<payload>
-- state one letter (L live, H held, C consumed, D dead), erased "e" or "-",
-- targeted "t" or "-", instants as 16 digits (instant_key), the other fields
-- components (codec.lua: each ends in a space, and is written with every
-- control byte escaped, so "\n" ends the last), the holder (run, effect, claimed_at)
-- in held and consumed rows only, the minter's actor and basis and the dead
-- reason empty for none, the correlation keys in first-given order, then the
-- payload's JSON text ("" for null: consumed and erased rows). So a field
-- sits where the row's first bytes and the holder's length say: the state is
-- byte 1, received_at bytes 5 to 20, claimed_at follows the holder, and a
-- patch rewrites what changed and copies the rest. Replies carry a row as
-- eid .. the row up to its "\n", the payload beside it (event_reply), so that
-- a remembered reply can withhold it; Python reads both
-- (agentplane_redis/codec.py, event_row).
-- A live row sits in the live indexes; a held row is named by its wait's mark
-- (waits.lua); a consumed or dead row sits in its retention index (consumed, dead).
-- A claim ends with its wait's mark: whoever sheds, releases or kills a held
-- row clears the holder's mark in the same call.

-- The fields of a row as scripts hold them (event_fields): the state as a word,
-- source and id (from the eid), kind, received_at and claimed_at as 16 digits
-- ("" for none), erased and targeted "0" or "1", the keys as namespace, value,
-- and the payload last: in a row event_fields read, false until event_payload
-- cuts it from the stored text (making a string costs Redis a pass over its
-- bytes, and most reads of a row never need the payload).
local E_STATE, E_SOURCE, E_ID, E_KIND, E_RECEIVED = 1, 2, 3, 4, 5
local E_ACTOR, E_BASIS, E_RUN, E_EFFECT, E_CLAIMED = 6, 7, 8, 9, 10
local E_REASON, E_ERASED, E_TARGETED, E_KEYS = 11, 12, 13, 14
local STATE_OF = { L = "live", H = "held", C = "consumed", D = "dead" }
local LETTER = { live = "L", held = "H", consumed = "C", dead = "D" }
-- The row of each state with one correlation key, the usual, read by one match:
-- the first bytes and received_at, the holder (held, consumed), kind, actor,
-- basis, reason, namespace and value, and where the payload starts.
local ROW_HEAD = "^[LHCD]([e-])([t-]) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) "
local ROW_PATTERNS = {
  L = "^[LHCD]([e-])([t-]) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) \n()",
  H = "^[LHCD]([e-])([t-]) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) ([^%z\1-\32]*) ([^%z\1-\32]*) ()(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) ([^%z\1-\32]*) \n()",
}
ROW_PATTERNS.D, ROW_PATTERNS.C = ROW_PATTERNS.L, ROW_PATTERNS.H
-- Where a row's fields end, at most, for its one match to be tried.
local SHORT_ROW = 1024

local function event_fault(f)
  if #f < E_KEYS or (#f - E_KEYS) % 2 ~= 0 then
    return "wrong number of fields"
  end
  if f[E_SOURCE] == "" or f[E_ID] == "" or f[E_KIND] == "" then
    return "empty identifier"
  end
  local received = tonumber(f[E_RECEIVED]) - 1e15
  if received < MIN_INSTANT or received > MAX_INSTANT then
    return "received_at is not an instant"
  end
  if (f[E_ACTOR] == "") ~= (f[E_BASIS] == "") then
    return "half an operator"
  end
  for i = E_KEYS, #f - 1 do
    if f[i] == "" then
      return "empty correlation key"
    end
  end
  local state = f[E_STATE]
  local payload = f[#f]
  if (payload == false and f.at_payload <= #f.raw or payload and payload ~= "")
    and (state == "consumed" or f[E_ERASED] == "1") then
    return "a payload kept past its row's consumption or erasure"
  end
  if state == "live" and (f[E_ERASED] == "1" or f[E_TARGETED] == "1") then
    return "live row erased or targeted"
  end
  if state == "held" or state == "consumed" then
    local claimed = tonumber(f[E_CLAIMED]) - 1e15
    if f[E_RUN] == "" or f[E_EFFECT] == "" or claimed < MIN_INSTANT or claimed > MAX_INSTANT then
      return state .. " row without a whole claim"
    end
    if state == "held" and f[E_ERASED] == "1" then
      return "held row erased"
    end
  end
  return nil
end

-- The fields of a row of any shape (event_fields' other rows), whose fields end
-- at stop (its "\n"): its components split at their terminators, each with an
-- escaped byte checked and decoded; nil when it is not a row. No byte of a
-- field is read by a pattern, so a row of long fields costs its components'
-- count, not its bytes. f.nv keeps the keys as stored, encoded.
local function event_components(raw, stop, f, erased, targeted, received)
  local find, sub = string.find, string.sub
  if string.byte(raw, stop - 1) ~= 32 then
    return nil
  end
  local bang = find(raw, "!", 22, true)
  local escaped = bang and bang < stop
  local parts, coded, n, pos, at_third = {}, {}, 0, 22, nil
  while pos < stop do
    local e = find(raw, " ", pos, true)
    local c = sub(raw, pos, e - 1)
    n = n + 1
    coded[n] = c
    if escaped and find(c, "!", 1, true) then
      if find(c, "![^@-a]") or sub(c, -1) == "!" then
        return nil
      end
      c = unescape(c)
    end
    parts[n] = c
    if n == 2 then
      at_third = e + 1
    end
    pos = e + 1
  end
  local state = f[E_STATE]
  local first = 1
  if state == "held" or state == "consumed" then
    if n < 3 or #parts[3] ~= 16 or find(parts[3], "%D") then
      return nil
    end
    f[E_RUN], f[E_EFFECT], f[E_CLAIMED], first, f.at_claimed = parts[1], parts[2], parts[3], 4, at_third
  else
    f[E_RUN], f[E_EFFECT], f[E_CLAIMED] = "", "", ""
  end
  if n - first + 1 < 4 or (n - first + 1) % 2 ~= 0 then
    return nil
  end
  f[E_KIND], f[E_RECEIVED], f[E_ACTOR], f[E_BASIS] = parts[first], received, parts[first + 1], parts[first + 2]
  f[E_REASON], f[E_ERASED], f[E_TARGETED] = parts[first + 3], erased, targeted
  local k, nv = E_KEYS, {}
  for i = first + 4, n, 2 do
    f[k], f[k + 1] = parts[i], parts[i + 1]
    nv[#nv + 1] = coded[i] .. TERM .. coded[i + 1] .. TERM
    k = k + 2
  end
  f[k] = false
  f.at_payload, f.nv = stop + 1, nv
  return f
end

-- A stored row's fields, or nil when it is not a row. The table also keeps the
-- stored text (raw), where the payload starts (at_payload) and, in a held or
-- consumed row, where claimed_at sits (at_claimed): hold, event_restamp and
-- shed patch the text there instead of writing the row anew.
local function event_fields(eid, raw)
  local letter = string.sub(raw, 1, 1)
  local state = STATE_OF[letter]
  local stop = state and string.find(raw, "\n", 22, true)
  if not stop then
    return nil
  end
  local source, id = wid_parts(eid)
  local f
  if stop > SHORT_ROW then -- long fields: no match over their bytes
  elseif letter == "L" or letter == "D" then
    local e, t, received, kind, actor, basis, reason, ns, value, pos = string.match(raw, ROW_PATTERNS[letter])
    if e then
      f = { state, source, id, kind, received, actor, basis, "", "", "", reason, e == "e" and "1" or "0", t == "t" and "1" or "0", ns, value, false, at_payload = pos }
    end
  else
    local e, t, received, run, effect, at_claimed, claimed, kind, actor, basis, reason, ns, value, pos = string.match(raw, ROW_PATTERNS[letter])
    if e then
      f = { state, source, id, kind, received, actor, basis, run, effect, claimed, reason, e == "e" and "1" or "0", t == "t" and "1" or "0", ns, value, false, at_payload = pos, at_claimed = at_claimed }
    end
  end
  if f then -- the captures are the fields, unless a byte is escaped in them
    local bang = string.find(raw, "!", 22, true)
    if bang and bang < stop then
      f = nil
    end
  end
  if not f then
    local e, t, received = string.match(raw, ROW_HEAD)
    if not e then
      return nil
    end
    f = event_components(raw, stop, { state, source, id }, e == "e" and "1" or "0", t == "t" and "1" or "0", received)
    if not f then
      return nil
    end
  end
  f.raw = raw
  return f
end

-- A stored row's fields, checked (corruption aborts the script).
local function event_parse(eid, raw)
  local f = event_fields(eid, raw)
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

-- A field as a component: the empty one, the usual, without a search.
local function event_component(s)
  if s == "" then
    return TERM
  end
  return enc(s)
end

-- A row's text up to and including its "\n": all but the payload. f.wid (the
-- holder's id) and f.nv (the keys), where a caller set them, are the encoded
-- holder and keys.
local function event_head(f)
  local state = f[E_STATE]
  local holder = ""
  if state == "held" or state == "consumed" then
    holder = (f.wid or enc_pair(f[E_RUN], f[E_EFFECT])) .. f[E_CLAIMED] .. TERM
  end
  local head = LETTER[state] .. (f[E_ERASED] == "1" and "e" or "-") .. (f[E_TARGETED] == "1" and "t " or "- ")
    .. f[E_RECEIVED] .. TERM .. holder .. enc(f[E_KIND]) .. event_component(f[E_ACTOR])
    .. event_component(f[E_BASIS]) .. event_component(f[E_REASON])
  local n, nv = #f - 1, f.nv
  if n == E_KEYS + 1 then -- one correlation key, the usual
    return head .. (nv and nv[1] or enc_pair(f[E_KEYS], f[n])) .. "\n"
  elseif nv then
    return head .. table.concat(nv) .. "\n"
  end
  local out = { head }
  for i = E_KEYS, n, 2 do
    out[#out + 1] = enc_pair(f[i], f[i + 1])
  end
  out[#out + 1] = "\n"
  return table.concat(out)
end

-- The row's payload ("" for none), cut from the stored text the first time.
local function event_payload(f)
  local n = #f
  local payload = f[n]
  if payload == false then
    payload = string.sub(f.raw, f.at_payload)
    f[n] = payload
  end
  return payload
end

-- An event row's stored text.
local function event_pack(f)
  return event_head(f) .. event_payload(f)
end

-- Writes the row; returns its text without the payload (event_head).
local function event_write(eid, f)
  local payload = event_payload(f)
  f.raw = nil -- no longer the stored text
  local head = event_head(f)
  redis.call("HSET", K.events, eid, head .. payload)
  return head
end

-- {row, has payload, payload}: row is eid .. head, head the row's text up to
-- its "\n" (event_head), when the caller has it already. A reply holding a
-- payload is remembered with it withheld (core.lua, remember).
local function event_reply(eid, f, head)
  local row = eid .. (head or event_head(f))
  local payload = event_payload(f)
  if payload ~= "" then
    local triple = { row, "1", payload }
    WITHHELD[#WITHHELD + 1] = { triple, 2 }
    return triple
  end
  return { row, "0", "" }
end

-- The row's correlation keys, encoded "ns value", in first-given order.
local function event_nv(f)
  if f.nv then
    return f.nv
  end
  local out = {}
  for i = E_KEYS, #f - 1, 2 do
    out[#out + 1] = enc_pair(f[i], f[i + 1])
  end
  f.nv = out
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

-- The live order: time buckets (buckets.lua) of eids by received_at, whose
-- counts hash (K.live) also counts the live rows (field "").
TIME.live = TIME.family("live", "live_index", "live", "event:live:", "L", "J", true)

-- The live index entries of a row: its live slot (entries.live), and the
-- claim-search entries (buckets.lua, "Key buckets"): for each of its keys
-- ({bucket key, member}, in its keys' order), the bucket false where the call
-- did not name it. Buckets not named are noted for NEED: a caller checks with
-- need_checked before its first write. nv_list: its keys encoded, when the
-- caller has them; add: the row joins the live indexes (default: unless it is
-- live).
local function live_entries_of(eid, f, nv_list, add)
  if add == nil then
    add = f[E_STATE] ~= "live"
  end
  local kind, source = enc(f[E_KIND]), enc(f[E_SOURCE])
  local rest = " " .. source .. f[E_RECEIVED] .. string.sub(eid, #source + 1)
  local out = { live = TIME.live:slot(f[E_RECEIVED], eid, add) }
  for i, nv in ipairs(nv_list or event_nv(f)) do
    local h, bucket = key_bucket(kind .. nv)
    out[i] = { bucket, h .. rest }
  end
  return out
end

-- Collects the live index entries of rows into acc (a new one when nil), to
-- add or remove them together; returns acc.
local function live_collect(acc, eid, f)
  acc = acc or { slots = {}, by_bucket = {}, buckets = {} }
  local entries = live_entries_of(eid, f)
  acc.slots[#acc.slots + 1] = entries.live
  for _, e in ipairs(entries) do
    local list = acc.by_bucket[e[1]]
    if not list then
      list = {}
      acc.by_bucket[e[1]], acc.buckets[#acc.buckets + 1] = list, e[1]
    end
    list[#list + 1] = e[2]
  end
  return acc
end

-- Adds or removes what live_collect collected (need_checked first).
local function live_apply(acc, add)
  need_checked()
  local apply = add and zadd_all or zrem_all
  if add then
    for _, slot in ipairs(acc.slots) do
      TIME.live:apply(slot, true)
    end
  else
    TIME.live:remove_all(acc.slots)
  end
  for _, bucket in ipairs(acc.buckets) do
    apply(bucket, acc.by_bucket[bucket])
  end
end

-- Adds (add = true) or removes the live index entries of one row, one command
-- per entry (a row has one key, or a few), after need_checked: its first write.
-- entries: live_entries_of's, when the caller has them.
local function live_index(eid, f, add, entries)
  entries = entries or live_entries_of(eid, f, nil, add)
  need_checked()
  TIME.live:apply(entries.live, add)
  for _, e in ipairs(entries) do
    local bucket = e[1]
    if add then
      redis.call("ZADD", bucket, "0", e[2])
    else
      redis.call("ZREM", bucket, e[2])
    end
  end
end

-- The fields of a new row for the event of event_args (a), received at at,
-- its keys encoded kept (nv) for event_head.
local function new_event_row(a, at, state, run, effect, targeted)
  local received = instant_key(at)
  local f = { state, a.source, a.id, a.kind, received, a.actor, a.basis, run, effect, "", "", "0", targeted, nv = a.nv }
  if state == "held" then
    f[E_CLAIMED] = received
  end
  local keys, n = a.keys, #a.keys
  for i = 1, n do
    f[E_KEYS + i - 1] = keys[i]
  end
  f[E_KEYS + n] = a.payload
  return f
end

-- Holds the row for wait (run, effect), whose id is wid, with claimed_at = at;
-- returns its text without the payload (event_head's). The caller parks the
-- wait holding it (park's held). A live row as event_fields read it is
-- patched: its letter, and the holder put in after received_at.
local function hold(eid, f, run, effect, wid, at)
  local raw = f[E_STATE] == "live" and f.raw
  if f[E_STATE] == "live" then
    live_index(eid, f, false, f.entries)
  end
  local claimed = instant_key(at)
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED], f.wid = "held", run, effect, claimed, wid
  if raw then
    local head = "H" .. string.sub(raw, 2, 21) .. wid .. claimed .. TERM
      .. string.sub(raw, 22, f.at_payload - 1)
    redis.call("HSET", K.events, eid, head .. event_payload(f))
    f.raw = nil
    return head
  end
  return event_write(eid, f)
end

-- Sets the held row's claimed_at (16 digits); returns its text without the
-- payload (event_head's). A row as event_fields read it is patched where the
-- field sits.
local function event_restamp(eid, f, claimed)
  local raw, at = f.raw, f.at_claimed
  f[E_CLAIMED] = claimed
  if not raw then
    return event_write(eid, f)
  end
  local head = string.sub(raw, 1, at - 1) .. claimed .. string.sub(raw, at + 16, f.at_payload - 1)
  redis.call("HSET", K.events, eid, head .. event_payload(f))
  f.raw = nil
  return head
end

-- held -> consumed, patched into the stored text raw of a held row, whose
-- line end is at nl: its letter, and its payload emptied.
local function shed_stored(eid, raw, nl)
  redis.call("HSET", K.events, eid, "C" .. string.sub(raw, 2, nl))
  redis.call("ZADD", K.consumed, "0", string.sub(raw, 5, 4 + INSTANT_WIDTH) .. eid)
end

-- held -> consumed: the payload goes; identity, keys, minter and holder stay.
-- A held row as event_fields read it is patched (shed_stored).
local function shed(eid, f)
  local raw = f[E_STATE] == "held" and f.raw
  f[E_STATE], f[#f] = "consumed", ""
  if raw then
    shed_stored(eid, raw, f.at_payload - 1)
    f.raw = nil
    return
  end
  event_write(eid, f)
  redis.call("ZADD", K.consumed, "0", f[E_RECEIVED] .. eid)
end

-- held -> live at the original received_at, payload intact (its key buckets
-- checked before the caller's first write: f.entries, releases_checked's).
local function release(eid, f)
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED], f.wid = "live", "", "", "", nil
  event_write(eid, f)
  live_index(eid, f, true, f.entries)
end

-- live or held -> dead with reason; a dead row has no claim.
local function kill(eid, f, reason)
  if f[E_STATE] == "live" then
    live_index(eid, f, false)
  end
  f[E_STATE], f[E_RUN], f[E_EFFECT], f[E_CLAIMED], f[E_REASON], f.wid = "dead", "", "", "", reason, nil
  event_write(eid, f)
  redis.call("ZADD", K.dead, "0", f[E_RECEIVED] .. eid)
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

-- The state of a stored row without reading the rest (nil: not a row).
local function row_state(raw)
  return STATE_OF[string.sub(raw, 1, 1)]
end

-- Rows a listing step returns, in bytes, at most (past its first row): a step of
-- payloads at max_payload_bytes stays within the contract's server time.
local LIST_BYTES = 1048576

-- A listing step's reply for members "instant . eid" of the index of rows in
-- state (or, with ats, eids and their instants, a time bucket page's):
-- {"OK" | "MORE", last member listed ("" for none), eid, row as stored, ...}, the
-- rows read up to LIST_BYTES (MORE: stopped there; call again after the last).
-- Read-only: rows go back as stored, each beside its eid rather than joined to
-- it (a string made is a pass over its bytes), and Python decodes and checks
-- every field.
local function listed_rows(members, state, ats)
  local out, size, last = { "OK", "" }, 0, 0
  for i, m in ipairs(members) do
    if size >= LIST_BYTES then
      out[1] = "MORE"
      break
    end
    local eid = ats and m or eid_after(m, 0)
    local raw = redis.call("HGET", K.events, eid)
    if not raw or row_state(raw) ~= state then
      corrupt("index", m, state .. " index names a row that is not " .. state)
    end
    out[2 * i + 1], out[2 * i + 2] = eid, raw
    size, last = size + #raw, i
  end
  if last > 0 then -- the cursor: the last row's member (ats: instant . eid)
    out[2] = ats and ats[last] .. members[last] or members[last]
  end
  return out
end

-- The oldest live row under a key (kind, and base = enc(kind) .. nv), from
-- source (encoded) when given, else from any: its eid, key-bucket member and
-- fields (event_fields'), or nil. The key's bucket holds hash . " " . source .
-- instant . id, so the search with a sender reads its first entry, and the one
-- without reads the first entry of each sender that has live rows under the
-- hash, keeping the oldest by (received_at, source, id). An entry whose row is
-- not of the key (another key of the same hash) is passed over.
local function oldest_live(kind, base, nv, source)
  local h, bucket = key_bucket(base)
  need_checked()
  local mine = { [nv] = true }
  -- The first entry of the key from member m on (m's sender prefix `prefix`,
  -- position `stop` its terminator): eid, at, fields; nil when none.
  local function first_of(m, prefix, stop)
    local offset = 0
    while m do
      local at = string.sub(m, stop + 1, stop + INSTANT_WIDTH)
      local source_c = string.sub(m, #h + 2, stop)
      local eid = source_c .. string.sub(m, stop + INSTANT_WIDTH + 1)
      local f = event_read(eid)
      if not f or f[E_STATE] ~= "live" or f[E_RECEIVED] ~= at then
        corrupt("index", m, "live index names a row that is not live")
      end
      if f[E_KIND] == kind and event_has_key(f, mine) then
        return eid, m, f, at
      end
      offset = offset + 1
      m = redis.call("ZRANGEBYLEX", bucket, "[" .. prefix, "(" .. prefix .. "\255", "LIMIT", offset, "1")[1]
    end
    return nil
  end
  if source then
    local prefix = h .. " " .. source
    local m = redis.call("ZRANGEBYLEX", bucket, "[" .. prefix, "(" .. prefix .. "\255", "LIMIT", "0", "1")[1]
    return first_of(m, prefix, #prefix)
  end
  local best, best_m, best_f, best_at, best_eid
  local head = h .. " "
  local last = "(" .. head .. "\255"
  -- The first entries under the hash, as many as WAIT.heads reads of a key's
  -- waits: each sender's first among them, then one sender at a time.
  local read = redis.call("ZRANGEBYLEX", bucket, "[" .. head, last, "LIMIT", "0", WAIT.HEADS)
  local i, more, m = 1, #read == WAIT.HEADS, read[1]
  while m do
    local stop = string.find(m, TERM, #head + 1, true)
    if not stop then
      corrupt("index", m, "bad live entry")
    end
    local prefix = string.sub(m, 1, stop)
    local eid, em, f, at = first_of(m, prefix, stop)
    if eid then
      at = tonumber(at)
      if not best or at < best_at or (at == best_at and bytes_lt(eid, best_eid)) then
        best, best_m, best_f, best_at, best_eid = eid, em, f, at, eid
      end
    end
    repeat
      i = i + 1
    until not read[i] or string.sub(read[i], 1, stop) ~= prefix
    m = read[i]
    if not m and more then
      m = redis.call("ZRANGEBYLEX", bucket, "(" .. prefix .. "\255", last, "LIMIT", "0", "1")[1]
      read, i = { m }, 1
    end
  end
  return best, best_m, best_f
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

-- Inserts the event of event_args as a new row in state (live or held); a live
-- one's key buckets are checked (need_checked) before its first write.
local function insert_event(a, at, state, run, effect, targeted)
  local f = new_event_row(a, at, state, run, effect, targeted)
  if state == "live" then
    local entries = live_entries_of(a.eid, f, a.nv, true)
    if #entries > 0 then
      split_checked()
    end
    need_checked()
    event_write(a.eid, f)
    live_index(a.eid, f, true, entries)
    key_grow(entries[1] and entries[1][1])
  else
    event_write(a.eid, f)
  end
  return f
end
