-- stats: exact counts of the tenant's event store, from cardinalities and counters, in one snapshot.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- Returns: {"OK", live, claimed, consumed, dead, waits, parked}
-- Errors: none

-- Every row is in exactly one state, and every state but held has an index:
-- the held rows are the rest.
local live, consumed, dead = tonumber(redis.call("HGET", K.live, "") or "0"), redis.call("ZCARD", K.consumed), redis.call("ZCARD", K.dead)
return {
  "OK",
  live,
  redis.call("HLEN", K.events) - live - consumed - dead,
  consumed,
  dead,
  tonumber(redis.call("GET", K.wait_count) or "0"),
  redis.call("HLEN", K.marks),
}
