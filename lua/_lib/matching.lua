-- Pairing events with waits, and retiring a run's waits and claims.

local function nv_set(nv_list)
  local set = {}
  for _, nv in ipairs(nv_list) do
    set[nv] = true
  end
  return set
end

-- The oldest live row for a wait of kind, sender from ("" for any) and keys
-- nv_list, by its keys in order: its eid and fields, with the buckets of all
-- its keys checked (need_checked), so that holding it writes no bucket the
-- call did not name; or nil. It only reads.
local function claim_search(kind, from, nv_list)
  local kind_c, from_c = enc(kind), from ~= "" and enc(from) or nil
  for _, nv in ipairs(nv_list) do
    local eid, _, f = oldest_live(kind, kind_c .. nv, nv, from_c)
    if eid then
      f.entries = live_entries_of(eid, f)
      need_checked()
      return eid, f
    end
  end
  return nil
end

-- claim_for: the event claimed for wait (run, effect), or nil (nothing written).
-- kind, from and nv_list come from the caller's subscription; attrs are the
-- wait's stored attributes, nil when it is not registered, or a function that
-- reads them (called, before any write, only when the wait is not parked yet);
-- marked: the wait's mark (false: none), when the caller has read it (nil: read here);
-- rows: its key rows when the caller has read them, UNLISTED for a wait with no
-- key rows in the election indexes, else nil (a function for attrs reads both);
-- sealed: whether the run is sealed, when the caller knows (nil: read if needed).
-- found: claim_search's result when the caller searched already ({eid, f}).
local function claim(run, effect, wid, attrs, kind, from, nv_list, at, marked, rows, sealed, found)
  if marked == nil then
    marked = redis.call("HGET", K.marks, wid)
  end
  local function attributes()
    if type(attrs) == "function" then
      local read
      attrs, read = attrs()
      rows = rows or read
    end
    return attrs
  end
  local held = mark_held(marked)
  if held then
    -- Own-claim recovery: the only event a wait holding a claim can get.
    local f = event_read(held)
    if not f or f[E_STATE] ~= "held" or f[E_RUN] ~= run or f[E_EFFECT] ~= effect then
      corrupt("claim", wid, "mark names a row not held for its wait")
    end
    if f[E_KIND] ~= kind or (from ~= "" and f[E_SOURCE] ~= from) or not event_has_key(f, nv_set(nv_list)) then
      return nil
    end
    local row = event_restamp(held, f, instant_key(at))
    park(run, wid, nil, at, rows, sealed, held)
    return held, f, row
  end
  if marked then
    return nil
  end
  local eid, f
  if found then
    eid, f = found.eid, found.f
  else
    eid, f = claim_search(kind, from, nv_list)
  end
  if not eid then
    return nil
  end
  local in_force = attributes()
  -- Parked, the wait leaves the election under each of its keys.
  rows = rows or key_rows(wid)
  election_checked(in_force, rows)
  need_checked()
  local row = hold(eid, f, run, effect, wid, at)
  park(run, wid, in_force, at, rows, sealed, eid)
  return eid, f, row
end

-- The text a HIT reply is remembered as: serialize's of {"HIT", stamp, row,
-- has payload, payload} with the payload withheld ("R", ""), written directly.
local function hit_text(stamp, row, has_payload)
  return "*5:$3:HIT" .. (DOLLAR[#stamp] or dollar(#stamp)) .. stamp .. (DOLLAR[#row] or dollar(#row)) .. row
    .. (has_payload == "1" and "$1:R$0:" or "$1:0$0:")
end

-- claim_for's and wait's reply for the subscription of sub_args.
local function claim_reply(sub, attrs, at, marked, rows, sealed, found)
  local eid, f, row = claim(sub.run, sub.effect, sub.wid, attrs, sub.kind, sub.from, sub.nv, at, marked, rows, sealed, found)
  if not eid then
    return words("MISS", decimal(at))
  end
  local reply = event_reply(eid, f, row)
  local stamp = decimal(at)
  local out = { "HIT", stamp, reply[1], reply[2], reply[3], text = hit_text(stamp, reply[1], reply[2]) }
  if reply[2] == "1" then -- the payload, withheld from the remembered reply, is here
    WITHHELD[#WITHHELD] = { out, 4 }
  end
  return out
end

-- match_waiter's election: the oldest unparked, unsealed wait for an event row
-- (f: its kind, sender and keys; nv_list: its keys encoded, when the caller has
-- them), as run, effect, wid, attributes and key rows; or nil.
-- It only reads. Parked waits and sealed runs' waits have no election entries,
-- so the first entry of each key is its winner; under a key's hash, the waits
-- of any sender and those restricted to the event's sender are two groups,
-- merged here by bytes. An entry of another key of the same hash is passed over.
local function electee(f, nv_list)
  local kind, source = enc(f[E_KIND]), enc(f[E_SOURCE])
  nv_list = nv_list or event_nv(f)
  for _, nv in ipairs(nv_list) do
    local h, bucket = key_bucket(kind .. nv)
    need_checked()
    -- What follows the group prefix in its entry m (created_at . wid), and
    -- the wid; of the group's entry at offset, with entry_at.
    local function parted(m, prefix)
      if m then
        local rest = string.sub(m, #prefix + 1)
        return rest, string.sub(rest, INSTANT_WIDTH + 1)
      end
    end
    local function entry_at(prefix, offset)
      local m = redis.call("ZRANGEBYLEX", bucket, "[" .. prefix, "(" .. prefix .. "\255", "LIMIT", offset, "1")[1]
      return parted(m, prefix)
    end
    -- The first entry of the group, from its entry at offset 0 (rest, wid),
    -- whose wait is of this key: rest, wid, attributes and key rows.
    local function first_of(prefix, rest, wid)
      local offset = 0
      while rest do
        local attrs, rows = wait_read(wid)
        if not attrs then
          corrupt("index", wid, "election entry of an unregistered wait")
        end
        if attrs[A_KIND] == kind then
          for _, row in ipairs(rows) do
            if row.nv == nv then
              return rest, wid, attrs, rows
            end
          end
        end
        offset = offset + 1
        rest, wid = entry_at(prefix, offset)
      end
      return nil
    end
    local am, om, any, own = WAIT.heads(bucket, h, source)
    local ra, wa = parted(am, any)
    local ro, wo = parted(om, own)
    -- The wait buckets of both groups' first waits, named at once.
    if wa then
      WAIT.bucket(wid_run(wa))
    end
    if wo then
      WAIT.bucket(wid_run(wo))
    end
    need_checked()
    local rest, wid, attrs, rows = first_of(any, ra, wa)
    local rb, wb, ab, rowsb = first_of(own, ro, wo)
    if rb and (not rest or bytes_lt(rb, rest)) then
      rest, wid, attrs, rows = rb, wb, ab, rowsb
    end
    if rest then
      local run, effect = wid_parts(wid)
      return run, effect, wid, attrs, rows
    end
  end
  return nil
end

-- Holds the row eid (live, or a new one not written yet) for the elected wait
-- and returns the wait's Subscription reply, or nil (nothing written).
local function elect(eid, f, at, nv_list)
  local run, effect, wid, attrs, rows = electee(f, nv_list)
  if not run then
    return nil
  end
  -- Parked, the winner leaves the election under each of its keys.
  election_checked(attrs, rows)
  need_checked()
  local reply = sub_reply(run, effect, wid, attrs, rows)
  hold(eid, f, run, effect, wid, at)
  park(run, wid, attrs, at, rows, false, eid)
  return reply
end

-- The rows a run holds claims on, in (received_at, source, id) order, checked.
-- A wait holding a claim is parked, its mark naming the row, so the run's
-- claims are named by its marks, of every class (wids: run_marks').
local function run_claims(run, wids)
  local eids, holders = {}, {}
  for i, mark in ipairs(#wids > 0 and hmget_all(K.marks, wids) or {}) do
    local eid = mark_held(mark)
    if eid then
      eids[#eids + 1], holders[#eids + 1] = eid, wids[i]
    end
  end
  local out = {}
  for i, raw in ipairs(#eids > 0 and hmget_all(K.events, eids) or {}) do
    local f = raw and event_parse(eids[i], raw)
    if not f or f[E_STATE] ~= "held" or f[E_RUN] ~= run then
      corrupt("claim", holders[i], "mark names a row not held by its run")
    end
    out[i] = { eid = eids[i], f = f, order = f[E_RECEIVED] .. eids[i] }
  end
  table.sort(out, function(a, b)
    return bytes_lt(a.order, b.order)
  end)
  return out
end

-- A run's waits (with attributes), marks and claims, read and checked before
-- any write; wids, marked and flat: its marks (run_marks') and rows (WAIT.run_rows'),
-- where read already.
local function read_run(run, wids, marked, flat)
  if not wids then
    wids, marked = run_marks(run)
  end
  return { waits = run_waits(run, flat), marks = wids, marked = marked, claims = run_claims(run, wids) }
end

-- The usual run: one registered wait and no mark but its own, retired field
-- by field as unsubscribe retires a wait (WAIT.retire_usual), unless its claim is
-- to be released (its effect unanswered). Returns whether it retired it,
-- having written nothing where not, and what it read: the run's marks
-- (run_marks') and rows (WAIT.run_rows'), for read_run.
function WAIT.retired_usual_run(run, unanswered)
  local wids, marked = run_marks(run)
  local flat = WAIT.run_rows(run)
  local wid, mark = flat[1], nil
  if #flat ~= 2 or #wids > 1 or wids[1] and wids[1] ~= wid then
    return false, wids, marked, flat
  end
  wid_ends(wid) -- a corrupt id is reported as read_run reports it
  if wids[1] then
    mark = redis.call("HGET", K.marks, wid)
    if not mark or mark_held(mark) and unanswered[select(2, wid_parts(wid))] then
      return false, wids, marked, flat
    end
  end
  return WAIT.retire_usual(wid, WAIT.named(run), flat[2], mark), wids, marked, flat
end

-- unsubscribe_run: retires every wait and mark of the run; releases (or, if
-- targeted, dead-letters) the claims of unanswered effects and sheds the rest.
-- Returns the count of registered waits retired and the released event replies.
-- The key buckets that retire_run writes (the claims it releases, the
-- election entries of unparked waits), checked (need_checked) before the
-- caller's first write.
local function releases_checked(state, unanswered)
  if not state.checked then
    for _, c in ipairs(state.claims) do
      if unanswered[c.f[E_EFFECT]] and c.f[E_TARGETED] ~= "1" then
        c.f.entries = live_entries_of(c.eid, c.f)
      end
    end
    -- An unparked wait leaves the election as it is retired, and every one
    -- the registration order.
    for _, w in ipairs(state.waits) do
      if not state.marked[w.wid] then
        election_checked(w.attrs, w.rows)
      end
      if w.attrs then
        w.rows = TIME.order.checked(w.wid, w.rows)
      end
    end
    need_checked()
    state.checked = true
  end
end

local function retire_run(run, unanswered, state)
  releases_checked(state, unanswered)
  local waits, claims, marked = state.waits, state.claims, state.marked
  local count, released, retired = 0, {}, {}
  for _, w in ipairs(waits) do
    count = count + retire_wait(w.wid, w.attrs, w.rows, marked[w.wid] ~= nil)
    retired[w.wid] = true
  end
  -- The marks of waits without a row (bare, or left by a sealed run's retirement).
  for _, wid in ipairs(state.marks) do
    if not retired[wid] then
      mark_clear(wid)
    end
  end
  for _, c in ipairs(claims) do
    if not unanswered[c.f[E_EFFECT]] then
      shed(c.eid, c.f)
    elseif c.f[E_TARGETED] == "1" then
      kill(c.eid, c.f, "the run it was addressed to concluded without consuming it")
    else
      release(c.eid, c.f)
      released[#released + 1] = event_reply(c.eid, c.f)
    end
  end
  return count, released
end

-- seal: writes the marker of an unsealed run. Its waits (read beforehand) leave
-- the election indexes and its marks become "sealed" marks, which parked_waits retires.
local function seal_run(run, at, state)
  local marked = state.marked
  redis.call("HSET", K.seals, run, decimal(at))
  for _, w in ipairs(state.waits) do
    if not marked[w.wid] then
      electable_set(w.wid, w.attrs, false, w.rows)
    end
  end
  for _, wid in ipairs(state.marks) do -- of classes "L" and "B" (run_marks)
    redis.call("ZREM", K.mark_index, marked[wid] .. wid)
    redis.call("ZADD", K.mark_index, "0", "S" .. wid)
  end
  return true
end
