-- Timers: rows and indexes.
--
-- A timer "tid" = enc(run) . enc(effect) has a row (tag "t1", fire_at, step,
-- phase, case, claimed_at, lease ms; "" for none) and sits in timer_due
-- (every timer, by fire_at) and timer_run (by tid). An unheld timer, or one
-- whose lease has lapsed, sits in timer_ready, which claim_due walks; a timer
-- under a lease sits in timer_held by lease expiry instead, so a backlog of held
-- timers costs a sweep nothing until their leases lapse.

local T_FIRE, T_STEP, T_PHASE, T_CASE, T_CLAIMED, T_LEASE = 2, 3, 4, 5, 6, 7

-- A stored timer row's fields, checked (corruption aborts the script): the
-- whole check, which timer_parse falls back to.
local function timer_parse_checked(tid, raw)
  local f = unpack_row(raw)
  local ok = f and #f == 7 and f[1] == "t1" and is_instant(f[T_FIRE]) and is_step(f[T_STEP])
    and is_phase(f[T_PHASE])
  if ok and (f[T_CLAIMED] ~= "" or f[T_LEASE] ~= "") then
    ok = is_instant(f[T_CLAIMED]) and string.find(f[T_LEASE], "^%d+$") ~= nil and #f[T_LEASE] <= 15
      and tonumber(f[T_LEASE]) >= 1
  end
  if not ok then
    corrupt("timer", tid, "bad timer row")
  end
  return f
end

-- The usual row read with two pattern matches instead of a call into C per
-- field (the hottest read of claim_due): the fields as timer_parse_checked
-- reads them, or nil when the row is not in the usual form (then the whole
-- check decides).
local function timer_fields(raw)
  local L = LENGTH
  local fire, step, phase, at, n =
    usual_fields(raw, "^2:t1,(%d+:)(%-?%d+),(%d+:)(%d+),(%d+:)(%l+),(%d+:)()")
  if not fire then
    return nil
  end
  local case = string.sub(raw, at, at + n - 1)
  local kl, claimed, ll, lease = string.match(raw, "^,(%d+:)(%-?%d*),(%d+:)(%d*),$", at + n)
  if not kl or (L[#claimed] or length_colon(#claimed)) ~= kl
    or (L[#lease] or length_colon(#lease)) ~= ll then
    return nil
  end
  -- What the patterns leave to check: the ranges (a number of at most 13
  -- characters is in range without converting it), the phase, and a claim's
  -- two halves.
  if (#fire > 13 and not is_instant(fire)) or (#step > 9 and not is_step(step)) then
    return nil
  end
  if phase ~= "forward" and phase ~= "compensating" then
    return nil
  end
  if (claimed ~= "" or lease ~= "")
    and not (is_instant(claimed) and #lease <= 15 and string.find(lease, "[1-9]")) then
    return nil
  end
  return { "t1", fire, step, phase, case, claimed, lease }
end

local function timer_parse(tid, raw)
  return timer_fields(raw) or timer_parse_checked(tid, raw)
end

-- A timer row's text: pack's, as one concatenation.
local function timer_pack(f)
  local L, a, b, c, d, e, g, h = LENGTH, f[1], f[2], f[3], f[4], f[5], f[6], f[7]
  return (L[#a] or length_colon(#a)) .. a .. "," .. (L[#b] or length_colon(#b)) .. b .. ","
    .. (L[#c] or length_colon(#c)) .. c .. "," .. (L[#d] or length_colon(#d)) .. d .. ","
    .. (L[#e] or length_colon(#e)) .. e .. "," .. (L[#g] or length_colon(#g)) .. g .. ","
    .. (L[#h] or length_colon(#h)) .. h .. ","
end

local function timer_read(tid)
  local raw = redis.call("HGET", K.timers, tid)
  return raw and timer_parse(tid, raw) or nil
end

-- The checked row of a timer an index entry (member) names; corrupt when it is gone.
local function timer_indexed(tid, raw, member)
  if not raw then
    corrupt("index", member, "timer index names a timer that is gone")
  end
  return timer_parse(tid, raw)
end

-- The checked rows of many timers, read in one call.
local function timers_read(tids, members)
  local rows = {}
  for i, raw in ipairs(hmget_all(K.timers, tids)) do
    rows[i] = timer_indexed(tids[i], raw, members[i])
  end
  return rows
end

local function due_member(tid, f)
  return instant_key_of(f[T_FIRE]) .. tid
end

local function held_member(tid, f)
  return instant_key(tonumber(f[T_CLAIMED]) + tonumber(f[T_LEASE])) .. tid
end

-- Deletes many timers ({tid, f} each) with one command per structure.
local function timers_delete(timers)
  local tids, dues, held = {}, {}, {}
  for i, t in ipairs(timers) do
    tids[i], dues[i] = t.tid, due_member(t.tid, t.f)
    if t.f[T_CLAIMED] ~= "" then
      held[#held + 1] = held_member(t.tid, t.f)
    end
  end
  call_all("HDEL", K.timers, tids)
  call_all("ZREM", K.timer_due, dues)
  call_all("ZREM", K.timer_ready, dues)
  call_all("ZREM", K.timer_held, held)
  call_all("ZREM", K.timer_run, tids)
end

-- The same for one timer, one command per structure.
local function timer_delete(tid, f)
  local due = due_member(tid, f)
  redis.call("HDEL", K.timers, tid)
  redis.call("ZREM", K.timer_due, due)
  redis.call("ZREM", K.timer_ready, due)
  if f[T_CLAIMED] ~= "" then
    redis.call("ZREM", K.timer_held, held_member(tid, f))
  end
  redis.call("ZREM", K.timer_run, tid)
end

local function timer_reply(tid, f)
  local run, effect = wid_parts(tid)
  return { run, effect, timer_pack(f) }
end

-- The run's timers in effect order, checked: a list of {tid, f}.
local function run_timers(run)
  local tids, out = with_prefix(K.timer_run, enc(run)), {}
  for i, f in ipairs(timers_read(tids, tids)) do
    out[i] = { tid = tids[i], f = f }
  end
  return out
end

-- Puts a sealed run's held timers back in the walk, where claim_due retires them.
local function expose_timers(timers)
  for _, t in ipairs(timers) do
    if t.f[T_CLAIMED] ~= "" then
      redis.call("ZREM", K.timer_held, held_member(t.tid, t.f))
      redis.call("ZADD", K.timer_ready, "0", due_member(t.tid, t.f))
    end
  end
end
