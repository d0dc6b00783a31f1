-- timer_stats: how many timers are armed, due (unheld, fire_at at or before now), and held.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- ARGV[1] now: instant ms, "" reads the server clock
-- Returns: {"OK", armed, due, held}
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua

local now = instant_arg(ARGV[1])
local unheld, held = redis.call("ZCARD", K.timer_walk), redis.call("ZCARD", K.timer_held)
local due = redis.call("ZCOUNT", K.timer_walk, "-inf", decimal(now))
return { "OK", unheld + held, due, held }
