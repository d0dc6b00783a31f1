-- reschedule: set an armed timer's fire_at, unless it is under a live lease.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[4] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[5] geometry: agentplane:{<tenant>}:buckets
-- KEYS[6] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[7] wake: agentplane:{<tenant>}:wake
-- KEYS[8] replies: agentplane:{<tenant>}:reply
-- KEYS[9] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- ARGV[3] fire_at: instant ms, the new fire time
-- ARGV[4] now: instant ms, "" reads the server clock (a lease live at now is kept)
-- ARGV[5] release: "1" takes a timer under a live lease too (its holder retrying later), "0" not
-- Returns: {"OK"} | {"NONE"} (not armed) | {"LEASED"} (under a live lease: unchanged)
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  timer_geometry()
  local tid = enc_pair(ARGV[1], ARGV[2])
  local attrs = redis.call("HGET", K.timer_bucket, tid)
  if not attrs then
    return words("NONE")
  end
  local m, fire_at = timer_member(tid, attrs), ARGV[3]
  if not redis.call("ZSCORE", K.timer_walk, m) then
    local expiry = redis.call("ZSCORE", K.timer_held, m)
    if not expiry then
      corrupt("index", tid, "a timer's row is in no walk")
    end
    local now = instant_arg(ARGV[4])
    if tonumber(expiry) > now then
      if ARGV[5] ~= "1" then
        return words("LEASED")
      end
      -- Released by its holder: the claim ends now (its count stays), so that no
      -- walk passes the timer over as held.
      local claim = redis.call("HGET", K.timer_claims, tid) or ""
      local at, count = string.match(claim, "^(%-?%d+) %d+ (%d+)$")
      if not at then
        corrupt("timer", tid, "a held timer without its claim")
      end
      local lease = math.max(1, now - tonumber(at))
      redis.call("HSET", K.timer_claims, tid, at .. " " .. decimal(lease) .. " " .. count)
    end
    -- A lapsed (or released) lease: the timer goes back to the walk at its new time.
    redis.call("ZREM", K.timer_held, m)
    redis.call("ZREM", K.timer_held_fire, m)
  end
  local head = redis.call("ZRANGE", K.timer_walk, "0", "0", "WITHSCORES")[2]
  redis.call("ZADD", K.timer_walk, fire_at, m)
  if not head or tonumber(fire_at) < tonumber(head) then
    wake("t")
  end
  return words("OK")
end)
