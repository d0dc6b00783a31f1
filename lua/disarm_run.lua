-- disarm_run: delete every timer of one run.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[4] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[5] geometry: agentplane:{<tenant>}:buckets
-- KEYS[6] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[7] replies: agentplane:{<tenant>}:reply
-- KEYS[8] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the run
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  local timers = run_timers(ARGV[1])
  timers_delete(timers)
  return words("OK", #timers)
end)
