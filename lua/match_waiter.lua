-- match_waiter: offer a stored live event to the oldest eligible wait and claim it.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] marks: agentplane:{<tenant>}:mark
-- KEYS[5] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[6] geometry: agentplane:{<tenant>}:buckets
-- KEYS[7] replies: agentplane:{<tenant>}:reply
-- KEYS[8] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2] source: the event's source
-- ARGV[3] id: the event's id
-- Returns: {"MATCHED", at, subscription} | {"NONE", at} | {"NEED", geometry, bucket, ...}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local eid = enc_pair(ARGV[2], ARGV[3])
  local f = event_read(eid)
  if not f or f[E_STATE] ~= "live" then
    return words("NONE", decimal(at))
  end
  local sub = elect(eid, f, at)
  if sub then
    return sub_status("MATCHED", decimal(at), sub)
  end
  return words("NONE", decimal(at))
end)
