-- armed: one run's timers, in effect order.
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- ARGV[1] run: the run
-- Returns: {"OK", {run, effect, timer row}, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local out = { "OK" }
  for _, t in ipairs(run_timers(ARGV[1])) do
    out[#out + 1] = timer_reply(t.tid, t.f)
  end
  return out
end)
