-- deliver: buffer an event, then offer it to the oldest eligible wait, in one step.
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
--   call reads or writes, as many as it names (NEED asks for more); and the two the next split of the key
--   buckets writes
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] event: source, id, kind, payload JSON, minter actor, minter basis ("" none), then (namespace, value) pairs
-- Returns: {"RESUMED", at, subscription} | {"BUFFERED", at} | {"DUPLICATE", at} | {"NEED", geometry, bucket, ...}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local event = event_args(2)
  local f = event_read(event.eid)
  if not f then
    -- A new event goes straight to the wait it resumes (held: it never enters
    -- the live indexes), or is buffered live.
    f = new_event_row(event, at, "held", "", "", "0")
    local sub = elect(event.eid, f, at, event.nv)
    if not sub then
      insert_event(event, at, "live", "", "", "0")
      return words("BUFFERED", decimal(at))
    end
    return sub_status("RESUMED", decimal(at), sub)
  end
  if f[E_STATE] ~= "live" then
    return words("DUPLICATE", decimal(at))
  end
  -- A live duplicate is offered again: that heals a crash after buffer.
  local sub = elect(event.eid, f, at)
  if sub then
    return sub_status("RESUMED", decimal(at), sub)
  end
  return words("DUPLICATE", decimal(at))
end)
