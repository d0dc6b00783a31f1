-- arm: store a timer unless (run, effect) is armed; first arming wins.
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- ARGV[3] fire_at: instant ms
-- ARGV[4] step: integer 0..2^32-1
-- ARGV[5] phase: "forward" | "compensating"
-- ARGV[6] case: the case, "" for none
-- Returns: {"NEW"} | {"SEEN"}
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local run, effect, fire_at = ARGV[1], ARGV[2], ARGV[3]
  local tid = enc(run) .. enc(effect)
  -- A replayed run re-arms: the first arming's fire_at and claim stay. timer_run
  -- names every armed timer, so adding to it only where absent is the check.
  if redis.call("ZADD", K.timer_run, "NX", "0", tid) == 0 then
    return words("SEEN")
  end
  local f = { "t1", fire_at, ARGV[4], ARGV[5], ARGV[6], "", "" }
  local member = due_member(tid, f)
  redis.call("HSET", K.timers, tid, timer_pack(f))
  redis.call("ZADD", K.timer_due, "0", member)
  redis.call("ZADD", K.timer_ready, "0", member)
  return words("NEW")
end)
