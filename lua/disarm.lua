-- disarm: delete a timer and its index entries, whoever holds it.
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
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"REMOVED"} | {"NONE"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/timers.lua

return guard(function()
  local tid = enc(ARGV[1]) .. enc(ARGV[2])
  local f = timer_read(tid)
  if not f then
    return words("NONE")
  end
  timer_delete(tid, f)
  return words("REMOVED")
end)
