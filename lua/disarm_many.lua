-- disarm_many: delete many timers in one step, whoever holds them (a batch completion).
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1..] timers: (run, effect) pairs, each at most once
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local tids = {}
  if #ARGV > 2 * STEP_MAX then
    refuse("more than " .. STEP_MAX .. " timers")
  end
  for i = 1, #ARGV - 1, 2 do
    tids[#tids + 1] = enc(ARGV[i]) .. enc(ARGV[i + 1])
  end
  -- Every row is read and checked before the first write.
  local gone = {}
  for i, raw in ipairs(hmget_all(K.timers, tids)) do
    if raw then
      gone[#gone + 1] = { tid = tids[i], f = timer_parse(tids[i], raw) }
    end
  end
  timers_delete(gone)
  return words("OK", #gone)
end)
