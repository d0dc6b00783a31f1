-- arm: store a timer unless (run, effect) is armed; first arming wins.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] geometry: agentplane:{<tenant>}:buckets
-- KEYS[4] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[5] wake: agentplane:{<tenant>}:wake
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- ARGV[3] fire_at: instant ms
-- ARGV[4] step: integer 0..2^32-1
-- ARGV[5] phase: "forward" | "compensating"
-- ARGV[6] case: the case, "" for none
-- Then two more keys: the buckets split and split + BUCKET_BASE * 2^level of the
--   geometry the client last saw (the next split writes them)
-- Returns: {"NEW"} | {"NEW", geometry after a split} | {"SEEN"} | {"BUCKETS", geometry}
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  local geo = timer_geometry()
  local tid = enc_pair(ARGV[1], ARGV[2])
  local attrs = timer_attrs(ARGV[4], ARGV[5], ARGV[6])
  -- A replayed run re-arms: the first arming's fire_at and claim stay. The
  -- bucket names every armed timer, so writing its row only where absent is the check.
  if redis.call("HSETNX", K.timer_bucket, tid, attrs) == 0 then
    return words("SEEN")
  end
  -- A timer that becomes the walk's head (the soonest, or the first) wakes one
  -- blocked worker, which may have planned to sleep until the head before it.
  local m = tid .. attrs
  redis.call("ZADD", K.timer_walk, ARGV[3], m)
  if redis.call("ZRANK", K.timer_walk, m) == 0 then
    wake("t")
  end
  if redis.call("HLEN", K.timer_bucket) > SPLIT_AT then
    local size = redis.call("ZCARD", K.timer_walk) + redis.call("ZCARD", K.timer_held)
    local grown = grow(geo, "timer", size, KEYS[8], KEYS[9])
    if grown then
      return words("NEW", grown)
    end
  end
  return words("NEW")
end)
