-- live_events: one step of the tenant's live events, oldest or newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- ARGV[1] room: count, the most rows this step lists
-- ARGV[2] after: the live index member of the last row the previous step listed, "" to start
-- ARGV[3] order: "oldest" or "newest" first
-- Returns: {"OK" | "MORE", last member, eid, event row as stored (its payload last), ...}
--   MORE: the step stopped at its budget of bytes before its room; call again after last
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  local room, after = bounded(ARGV[1]), ARGV[2]
  local members
  if ARGV[3] == "newest" then
    local start = after == "" and "+" or "(" .. after
    members = redis.call("ZREVRANGEBYLEX", K.live, start, "-", "LIMIT", "0", room)
  else
    local start = after == "" and "-" or "(" .. after
    members = redis.call("ZRANGEBYLEX", K.live, start, "+", "LIMIT", "0", room)
  end
  return listed_rows(members, "live")
end)
