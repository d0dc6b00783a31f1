-- claim_due: one bounded step of claiming due timers under a lease, soonest first.
--
-- KEYS[1] seals: agentplane:{<tenant>}:seal
-- KEYS[2] timers: agentplane:{<tenant>}:timer
-- KEYS[3] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[4] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[5] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[6] timer_run: agentplane:{<tenant>}:timer:run
-- ARGV[1] now: instant ms, "" reads the server clock
-- ARGV[2] room: count, the most timers this step claims
-- ARGV[3] lease: ms, the lease of each claim
-- ARGV[4] budget: count, the most entries this step examines
-- ARGV[5] after_fire: instant ms of the last timer examined by the previous step, "" to start
-- ARGV[6] after_run: its run
-- ARGV[7] after_effect: its effect
-- Returns: {"OK", now, more "1"/"0", last fire_at, last run, last effect, {run, effect, timer row}, ...}
-- Errors: CORRUPT

local K = {
  seals = KEYS[1],
  timers = KEYS[2],
  timer_due = KEYS[3],
  timer_ready = KEYS[4],
  timer_held = KEYS[5],
  timer_run = KEYS[6],
}

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local now, room, lease, budget = instant_arg(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local bound = "(" .. instant_key(now + 1)
  -- Leases lapsed by now return to the walk first, so it sees every claimable timer.
  local lapsed = redis.call("ZRANGEBYLEX", K.timer_held, "-", bound, "LIMIT", 0, budget)
  for _, m in ipairs(lapsed) do
    local tid = string.sub(m, INSTANT_WIDTH + 1)
    local f = timer_read(tid)
    if not f then
      corrupt("index", m, "held index names a timer that is gone")
    end
    redis.call("ZREM", K.timer_held, m)
    redis.call("ZADD", K.timer_ready, 0, due_member(tid, f))
  end
  if #lapsed == budget then
    return { "OK", decimal(now), "1", ARGV[5], ARGV[6], ARGV[7] }
  end
  local start = "-"
  if ARGV[5] ~= "" then
    start = "(" .. instant_key(tonumber(ARGV[5])) .. enc(ARGV[6]) .. enc(ARGV[7])
  end
  local walked = redis.call("ZRANGEBYLEX", K.timer_ready, start, bound, "LIMIT", 0, budget)
  local rows = {}
  for i, m in ipairs(walked) do
    rows[i] = { tid = string.sub(m, INSTANT_WIDTH + 1), member = m }
    rows[i].f = timer_read(rows[i].tid)
    if not rows[i].f then
      corrupt("index", m, "ready index names a timer that is gone")
    end
  end
  local out = { "OK", decimal(now), "0", "", "", "" }
  local claimed, last = 0, nil
  for _, r in ipairs(rows) do
    if claimed == room then
      break
    end
    last = r
    local f = r.f
    local run = wid_parts(r.tid)
    if redis.call("HEXISTS", K.seals, run) == 1 then
      -- A sealed run's timer is retired, held or not, and does not count.
      timer_delete(r.tid, f)
    elseif f[T_CLAIMED] == "" or tonumber(f[T_CLAIMED]) + tonumber(f[T_LEASE]) <= now then
      if f[T_CLAIMED] ~= "" then
        redis.call("ZREM", K.timer_held, held_member(r.tid, f))
      end
      f[T_CLAIMED], f[T_LEASE] = decimal(now), decimal(lease)
      redis.call("HSET", K.timers, r.tid, pack(f))
      redis.call("ZREM", K.timer_ready, r.member)
      redis.call("ZADD", K.timer_held, 0, held_member(r.tid, f))
      out[#out + 1] = timer_reply(r.tid, f)
      claimed = claimed + 1
    end
    -- Otherwise a lease live for this caller's clock (taken by a caller whose
    -- clock runs ahead) is passed over; the cursor resumes after it.
  end
  if #walked == budget and claimed < room then
    local run, effect = wid_parts(last.tid)
    out[3], out[4], out[5], out[6] = "1", decimal(tonumber(last.f[T_FIRE])), run, effect
  end
  return out
end)
