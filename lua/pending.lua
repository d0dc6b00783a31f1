-- pending: the soonest timers, due and held included (Python merges the two lists).
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- ARGV[1] limit: count, at most this many timers from each list
-- Returns: {"OK", {member, fire_at, ...} unheld, {member, fire_at, ...} held}
-- Errors: none

local n = tonumber(ARGV[1]) - 1
return {
  "OK",
  redis.call("ZRANGE", K.timer_walk, "0", n, "WITHSCORES"),
  redis.call("ZRANGE", K.timer_held_fire, "0", n, "WITHSCORES"),
}
