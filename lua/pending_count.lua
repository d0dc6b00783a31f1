-- pending_count: how many timers the tenant holds, due, held and sealed runs' included.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- Returns: {"OK", count}
-- Errors: none

return { "OK", redis.call("ZCARD", K.timer_walk) + redis.call("ZCARD", K.timer_held) }
