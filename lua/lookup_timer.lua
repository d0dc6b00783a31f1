-- lookup_timer: one armed timer, with its claim.
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- Returns: {"TIMER", timer row} | {"NONE"}
-- Errors: none

--@include _lib/codec.lua

local row = redis.call("HGET", K.timers, enc(ARGV[1]) .. enc(ARGV[2]))
if not row then
  return { "NONE" }
end
-- Read-only: the row goes back as stored; Python decodes and checks it.
return { "TIMER", row }
