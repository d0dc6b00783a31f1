-- pending: every timer, soonest first (due and held included).
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- ARGV[1] limit: count, at most this many timers
-- Returns: {"OK", {run, effect, timer row}, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local members = redis.call("ZRANGE", K.timer_due, "0", tonumber(ARGV[1]) - 1)
  local tids = {}
  for i, m in ipairs(members) do
    tids[i] = string.sub(m, INSTANT_WIDTH + 1)
  end
  -- Read-only: rows go back as stored; Python decodes and checks them.
  local out = { "OK" }
  for i, raw in ipairs(hmget_all(K.timers, tids)) do
    if not raw then
      corrupt("index", members[i], "due index names a timer that is gone")
    end
    local run, effect = wid_parts(tids[i])
    out[i + 1] = { run, effect, raw }
  end
  return out
end)
