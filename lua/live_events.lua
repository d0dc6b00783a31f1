-- live_events: one step of the tenant's live events, oldest or newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] geometry: agentplane:{<tenant>}:buckets
-- Then the live buckets (agentplane:{<tenant>}:event:live:<start>) the call reads, as many as it names
--   (NEED asks for more)
-- ARGV[1] room: count, the most rows this step lists
-- ARGV[2] after: the live bucket member of the last row the previous step listed, "" to start
-- ARGV[3] order: "oldest" or "newest" first
-- Returns: {"OK" | "MORE", last member, eid, event row as stored (its payload last), ...}
--   MORE: the step stopped before its room (at its budget of bytes, or at its last bucket); call again
--   after last | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local eids, ats, more = TIME.live:page(bounded(ARGV[1]), ARGV[2], ARGV[3] == "newest")
  local out = listed_rows(eids, "live", ats)
  if more then
    -- Its buckets ran out before its room: the next step goes on from the last seen.
    out[1], out[2] = "MORE", out[1] == "MORE" and out[2] or more
  end
  return out
end)
