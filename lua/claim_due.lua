-- claim_due: one bounded step of claiming due timers under a lease, soonest first.
--
-- KEYS[1] seals: agentplane:{<tenant>}:seal
-- KEYS[2] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[3] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[4] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[5] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[6] geometry: agentplane:{<tenant>}:buckets
-- KEYS[7] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[8] replies: agentplane:{<tenant>}:reply
-- KEYS[9] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] now: instant ms, "" reads the server clock
-- ARGV[2] room: count, the most timers this step claims
-- ARGV[3] lease: ms, the lease of each claim
-- ARGV[4] budget: count, the most entries this step examines
-- ARGV[5] retire: the sealed run whose bucket timer_bucket is, "" for none
-- ARGV[6] skip: count, entries at the walk's head that earlier steps of this call passed over
-- Returns: {"OK" | "RETIRE", now, more "1"/"0", run to retire or "", skip, then member, fire_at, claims for each timer claimed}
--   RETIRE: the walk met a timer of a sealed run other than ARGV[5]; call again with that run's bucket
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

-- A claim "claimed_at lease claims": whether it is live at now, and how many
-- claims the timer has had.
local function claim_of(claim, now)
  local at, lease, count = string.match(claim, "^(%-?%d+) (%d+) (%d+)$")
  if not at then
    corrupt("timer", claim, "bad claim")
  end
  return tonumber(at) + tonumber(lease) > now, count
end

return guard(function()
  local now, room, lease, budget = instant_arg(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), bounded(ARGV[4])
  local retire, skip = ARGV[5], tonumber(ARGV[6])
  if retire ~= "" then
    timer_geometry()
  end
  local now_text = decimal(now)
  -- Leases lapsed by now return to the walk first, so it sees every claimable timer.
  local lapsed = redis.call("ZRANGEBYSCORE", K.timer_held, "-inf", now_text, "LIMIT", "0", budget)
  if #lapsed > 0 then
    local fires, back = redis.call("ZMSCORE", K.timer_held_fire, unpack(lapsed)), {}
    for i, m in ipairs(lapsed) do
      if not fires[i] then
        corrupt("index", m, "a held timer has no fire_at")
      end
      back[2 * i - 1], back[2 * i] = fires[i], m
    end
    zrem_all(K.timer_held, lapsed)
    zrem_all(K.timer_held_fire, lapsed)
    for first = 1, #back, CHUNK do
      redis.call("ZADD", K.timer_walk, unpack(back, first, math.min(first + CHUNK - 1, #back)))
    end
    if #lapsed == budget then
      return { "OK", now_text, "1", "", ARGV[6] }
    end
  end
  -- The walk examines no more entries than the step has room for: an entry
  -- examined leaves the walk (claimed or retired), unless its last claim's lease
  -- is live for this caller's clock (taken by a caller whose clock runs ahead,
  -- and restored by another): it is passed over, and the next step skips it.
  local reach = math.min(budget, room)
  local walked = redis.call("ZRANGEBYSCORE", K.timer_walk, "-inf", now_text, "WITHSCORES", "LIMIT", skip, reach)
  local n = #walked / 2
  local tids, runs = {}, {}
  for i = 1, n do
    tids[i], runs[i] = member_tid(walked[2 * i - 1])
  end
  local sealed = n > 0 and redis.call("HMGET", K.seals, unpack(runs)) or {}
  local last = n > 0 and redis.call("HMGET", K.timer_claims, unpack(tids)) or {}
  -- The reply's timers go straight into its text (guard remembers it as the
  -- body wrote it): three elements each, the member, fire_at as the walk's score
  -- prints it (an integer's decimal digits) and the claim count.
  local status, retire_run, text, t = "OK", "", {}, 1
  local taken, held, held_fire, claims, retired, examined = {}, {}, {}, {}, {}, 0
  local expiry, claim = decimal(now + lease), now_text .. " " .. decimal(lease) .. " "
  for i = 1, n do
    local m, fire = walked[2 * i - 1], walked[2 * i]
    if sealed[i] then
      -- A sealed run's timer is retired and does not count; its row is in its
      -- run's bucket, which this step may write only if it was given.
      if runs[i] ~= retire then
        status, retire_run = "RETIRE", runs[i]
        break
      end
      retired[#retired + 1] = { tid = tids[i], m = m }
    else
      local is_live, count = false, nil
      if last[i] then
        is_live, count = claim_of(last[i], now)
      end
      if is_live then
        skip = skip + 1
      else
        local k = 2 * #taken
        taken[#taken + 1] = m
        held[k + 1], held[k + 2] = expiry, m
        held_fire[k + 1], held_fire[k + 2] = fire, m
        -- The claim count goes up by one: "1" for a first claim, without a printf.
        local c = count and decimal(tonumber(count) + 1) or "1"
        claims[k + 1], claims[k + 2] = tids[i], claim .. c
        text[t + 1], text[t + 2], text[t + 3] = DOLLAR[#m] or dollar(#m), m, DOLLAR[#fire] or dollar(#fire)
        text[t + 4], text[t + 5], text[t + 6] = fire, DOLLAR[#c] or dollar(#c), c
        t = t + 6
      end
    end
    examined = i
  end
  for _, r in ipairs(retired) do
    redis.call("HDEL", K.timer_bucket, r.tid)
    redis.call("HDEL", K.timer_claims, r.tid)
    redis.call("ZREM", K.timer_walk, r.m)
  end
  if #taken > 0 then
    zrem_all(K.timer_walk, taken)
    for first = 1, #held, CHUNK do
      local last = math.min(first + CHUNK - 1, #held)
      redis.call("ZADD", K.timer_held, unpack(held, first, last))
      redis.call("ZADD", K.timer_held_fire, unpack(held_fire, first, last))
      redis.call("HSET", K.timer_claims, unpack(claims, first, last))
    end
  end
  local more = status == "OK" and examined == reach and #taken < room and "1" or "0"
  local head = { STAR[5 + 3 * #taken] or star(5 + 3 * #taken) }
  for _, e in ipairs({ status, now_text, more, retire_run, decimal(skip) }) do
    head[#head + 1] = DOLLAR[#e] or dollar(#e)
    head[#head + 1] = e
  end
  text[1] = table.concat(head)
  -- Only the text: guard answers it as the reply (core.lua).
  return { text = table.concat(text) }
end)
