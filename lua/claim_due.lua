-- claim_due: one bounded step of claiming due timers under a lease, soonest first.
--
-- KEYS[1] seals: agentplane:{<tenant>}:seal
-- KEYS[2] timers: agentplane:{<tenant>}:timer
-- KEYS[3] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[4] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[5] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[6] timer_run: agentplane:{<tenant>}:timer:run
-- KEYS[7] replies: agentplane:{<tenant>}:reply
-- KEYS[8] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] now: instant ms, "" reads the server clock
-- ARGV[2] room: count, the most timers this step claims
-- ARGV[3] lease: ms, the lease of each claim
-- ARGV[4] budget: count, the most entries this step examines
-- ARGV[5] after_fire: instant ms of the last timer examined by the previous step, "" to start
-- ARGV[6] after_run: its run
-- ARGV[7] after_effect: its effect
-- Returns: {"OK", now, more "1"/"0", last fire_at, last run, last effect, then tid, timer row for each timer claimed}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local now, room, lease, budget = instant_arg(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), bounded(ARGV[4])
  local bound = "(" .. instant_key(now + 1)
  -- Leases lapsed by now return to the walk first, so it sees every claimable timer.
  local lapsed = redis.call("ZRANGEBYLEX", K.timer_held, "-", bound, "LIMIT", "0", budget)
  if #lapsed > 0 then
    local tids, ready = {}, {}
    for i, m in ipairs(lapsed) do
      tids[i] = string.sub(m, INSTANT_WIDTH + 1)
    end
    for i, f in ipairs(timers_read(tids, lapsed)) do
      ready[i] = due_member(tids[i], f)
    end
    zrem_all(K.timer_held, lapsed)
    zadd_all(K.timer_ready, ready)
    if #lapsed == budget then
      return { "OK", decimal(now), "1", ARGV[5], ARGV[6], ARGV[7] }
    end
  end
  local start = "-"
  if ARGV[5] ~= "" then
    start = "(" .. instant_key(tonumber(ARGV[5])) .. enc(ARGV[6]) .. enc(ARGV[7])
  end
  -- The walk examines no more entries than the step has room for: a small page
  -- reads no rows it cannot hand out (a timer passed over, or retired, leaves
  -- the walk full and the step asks for another).
  local reach = math.min(budget, room)
  local walked = redis.call("ZRANGEBYLEX", K.timer_ready, start, bound, "LIMIT", "0", reach)
  local tids, runs = {}, {}
  for i, m in ipairs(walked) do
    tids[i] = string.sub(m, INSTANT_WIDTH + 1)
    runs[i] = wid_run(tids[i])
  end
  -- Rows are fetched in one command and read only as the walk reaches them: a
  -- page with little room left reads no more than it hands out.
  local raws, sealed = hmget_all(K.timers, tids), hmget_all(K.seals, runs)
  local out = { "OK", decimal(now), "0", "", "", "" }
  -- What every timer claimed here gets: its claim, and its place in timer_held.
  local claimed_at, lease_ms, held_key = decimal(now), decimal(lease), instant_key(now + lease)
  local written, taken, held, retired, last, last_fire = {}, {}, {}, {}, 0, nil
  for i = 1, #walked do
    if #taken == room then
      break
    end
    local f = timer_indexed(tids[i], raws[i], walked[i])
    last, last_fire = i, f[T_FIRE]
    if sealed[i] then
      -- A sealed run's timer is retired, held or not, and does not count.
      retired[#retired + 1] = { tid = tids[i], f = f }
    elseif f[T_CLAIMED] == "" or tonumber(f[T_CLAIMED]) + tonumber(f[T_LEASE]) <= now then
      f[T_CLAIMED], f[T_LEASE] = claimed_at, lease_ms
      local row = timer_pack(f)
      written[#written + 1] = tids[i]
      written[#written + 1] = row
      taken[#taken + 1] = walked[i]
      held[#held + 1] = held_key .. tids[i]
      out[#out + 1] = tids[i]
      out[#out + 1] = row
    end
    -- Otherwise a lease live for this caller's clock (taken by a caller whose
    -- clock runs ahead) is passed over; the cursor resumes after it.
  end
  -- Written only now: a corrupt row met on the walk leaves nothing written.
  if #retired > 0 then
    timers_delete(retired)
  end
  if #taken > 0 then
    redis.call("HSET", K.timers, unpack(written))
    zrem_all(K.timer_ready, taken)
    zadd_all(K.timer_held, held)
  end
  if #walked == reach and #taken < room then
    out[3], out[4] = "1", decimal(tonumber(last_fire))
    out[5], out[6] = wid_parts(tids[last])
  end
  return out
end)
