-- stats: exact counts of the tenant's event store, from cardinalities, in one snapshot.
--
-- KEYS[1] live: agentplane:{<tenant>}:event:live
-- KEYS[2] ledger: agentplane:{<tenant>}:claim
-- KEYS[3] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- Returns: {"OK", live, claimed, consumed, dead, waits, parked}
-- Errors: none

return {
  "OK",
  redis.call("ZCARD", K.live),
  redis.call("HLEN", K.ledger),
  redis.call("ZCARD", K.consumed),
  redis.call("ZCARD", K.dead),
  tonumber(redis.call("GET", K.wait_count) or "0"),
  redis.call("HLEN", K.marks),
}
