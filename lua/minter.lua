-- minter: the stored row of an event, for who minted it.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- ARGV[1] source: the event's source
-- ARGV[2] id: the event's id
-- Returns: {"ROW", eid, event row as stored} | {"NONE"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local eid = enc_pair(ARGV[1], ARGV[2])
  local raw = redis.call("HGET", K.events, eid)
  if not raw then
    return words("NONE")
  end
  event_parse(eid, raw) -- checked, and replied as stored
  return { "ROW", eid, raw }
end)
