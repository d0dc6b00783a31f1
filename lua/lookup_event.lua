-- lookup_event: one stored event, whatever its state, with its payload.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- ARGV[1] source: the event's source
-- ARGV[2] id: the event's id
-- Returns: {"ROW", event row, has payload "1"/"0", payload JSON} | {"NONE"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local eid = enc_pair(ARGV[1], ARGV[2])
  local f = event_read(eid)
  if not f then
    return words("NONE")
  end
  local reply = event_reply(eid, f)
  return { "ROW", reply[1], reply[2], reply[3] }
end)
