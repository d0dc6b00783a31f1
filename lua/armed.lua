-- armed: one run's timers (Python puts them in effect order).
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[4] geometry: agentplane:{<tenant>}:buckets
-- KEYS[5] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- ARGV[1] run: the run
-- Returns: {"OK", member, fire_at, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  return timers_reply(run_timers(ARGV[1]), { "OK" })
end)
