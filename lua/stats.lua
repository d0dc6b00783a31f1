-- stats: exact counts of the tenant's event store, from cardinalities, in one snapshot.
--
-- KEYS[1] live: agentplane:{<tenant>}:event:live
-- KEYS[2] ledger: agentplane:{<tenant>}:claim
-- KEYS[3] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] waits: agentplane:{<tenant>}:wait
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- Returns: {"OK", live, claimed, consumed, dead, waits, parked}
-- Errors: none

local K = {
  live = KEYS[1],
  ledger = KEYS[2],
  consumed = KEYS[3],
  dead = KEYS[4],
  waits = KEYS[5],
  marks = KEYS[6],
}

return {
  "OK",
  redis.call("ZCARD", K.live),
  redis.call("HLEN", K.ledger),
  redis.call("ZCARD", K.consumed),
  redis.call("ZCARD", K.dead),
  redis.call("HLEN", K.waits),
  redis.call("HLEN", K.marks),
}
