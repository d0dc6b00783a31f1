-- disarm_many: delete many timers in one step, whoever holds them (a batch completion).
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- KEYS[2] timer_due: agentplane:{<tenant>}:timer:due
-- KEYS[3] timer_ready: agentplane:{<tenant>}:timer:ready
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_run: agentplane:{<tenant>}:timer:run
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- ARGV[1..] timers: (run, effect) pairs, each at most once
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local tids = {}
  for i = 1, #ARGV - 1, 2 do
    tids[#tids + 1] = enc(ARGV[i]) .. enc(ARGV[i + 1])
  end
  -- Every row is read and checked before the first write.
  local gone, dues, held = {}, {}, {}
  for i, raw in ipairs(hmget_all(K.timers, tids)) do
    if raw then
      local f = timer_parse(tids[i], raw)
      gone[#gone + 1] = tids[i]
      dues[#dues + 1] = due_member(tids[i], f)
      if f[T_CLAIMED] ~= "" then
        held[#held + 1] = held_member(tids[i], f)
      end
    end
  end
  if #gone > 0 then
    redis.call("HDEL", K.timers, unpack(gone))
  end
  zrem_all(K.timer_due, dues)
  zrem_all(K.timer_ready, dues)
  zrem_all(K.timer_run, gone)
  zrem_all(K.timer_held, held)
  return { "OK", #gone }
end)
