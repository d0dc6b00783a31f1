-- pending: the soonest timers, due and held included (Python merges the two lists).
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- ARGV[1] limit: count, at most this many timers from each list
-- Returns: {"OK", {member, fire_at, ...} unheld, {member, fire_at, ...} held}
-- Errors: none

--@include _lib/codec.lua

-- Each list's scores as the decimal ms every other timer reply carries.
local function listed(key, n)
  local flat = redis.call("ZRANGE", key, "0", n, "WITHSCORES")
  for i = 2, #flat, 2 do
    flat[i] = decimal(tonumber(flat[i]))
  end
  return flat
end

local n = tonumber(ARGV[1]) - 1
return { "OK", listed(K.timer_walk, n), listed(K.timer_held_fire, n) }
