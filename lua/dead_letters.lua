-- dead_letters: one step of the tenant's dead rows, newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] dead: agentplane:{<tenant>}:event:dead
-- ARGV[1] room: count, the most rows this step lists
-- ARGV[2] after: the dead index member of the last row the previous step listed, "" to start
-- Returns: {"OK" | "MORE", last member, eid, event row as stored (its payload last), ...}
--   MORE: the step stopped at its budget of bytes before its room; call again after last
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local room, after = bounded(ARGV[1]), ARGV[2]
  local start = after == "" and "+" or "(" .. after
  local members = redis.call("ZREVRANGEBYLEX", K.dead, start, "-", "LIMIT", "0", room)
  return listed_rows(members, "dead")
end)
