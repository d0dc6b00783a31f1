-- pending_count: how many timers the tenant holds, due, held and sealed runs' included.
--
-- KEYS[1] timers: agentplane:{<tenant>}:timer
-- Returns: {"OK", count}
-- Errors: none

return { "OK", redis.call("HLEN", K.timers) }
