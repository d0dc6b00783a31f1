-- buffer: store an inbound event as a live row unless its (source, id) exists.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] geometry: agentplane:{<tenant>}:buckets
-- KEYS[5] replies: agentplane:{<tenant>}:reply
-- KEYS[6] replies_old: agentplane:{<tenant>}:reply:old
-- Then the live buckets (agentplane:{<tenant>}:event:live:<start>) and the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) the call reads or writes, as many as it names (NEED asks for more); and the two the next split of the key
--   buckets writes
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] event: source, id, kind, payload JSON, minter actor, minter basis ("" none), then (namespace, value) pairs
-- Returns: {"NEW"} | {"SEEN"} | {"NEED", geometry, bucket, ...}
-- Errors: REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local event = event_args(2)
  -- Any existing row, whatever its state, is the same event: dedup holds until purge.
  if redis.call("HEXISTS", K.events, event.eid) == 1 then
    return words("SEEN")
  end
  insert_event(event, at, "live", "", "", "0")
  return words("NEW")
end)
