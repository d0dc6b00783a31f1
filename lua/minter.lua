-- minter: the stored row of an event, for who minted it.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- ARGV[1] source: the event's source
-- ARGV[2] id: the event's id
-- Returns: {"ROW", event row} | {"NONE"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

return guard(function()
  local eid = enc(ARGV[1]) .. enc(ARGV[2])
  local f = event_read(eid)
  if not f then
    return { "NONE" }
  end
  return { "ROW", pack(f) }
end)
