-- disarm_run: delete every timer of one run.
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the run
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local timers = run_timers(ARGV[1])
  timers_delete(timers)
  return words("OK", #timers)
end)
