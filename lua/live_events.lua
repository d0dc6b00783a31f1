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

-- Buckets one step reads, at most.
local STEP_BUCKETS = 4

return guard(function()
  local room, after, newest = bounded(ARGV[1]), ARGV[2], ARGV[3] == "newest"
  -- The buckets from the one holding `after` on.
  local starts
  if newest then
    local from = after == "" and "+" or "[" .. string.sub(after, 1, INSTANT_WIDTH)
    starts = redis.call("ZREVRANGEBYLEX", K.live_index, from, "-", "LIMIT", "0", STEP_BUCKETS)
  else
    local holding = after ~= "" and LIVE.holding(string.sub(after, 1, INSTANT_WIDTH))
    local from = holding and "[" .. holding or "-"
    starts = redis.call("ZRANGEBYLEX", K.live_index, from, "+", "LIMIT", "0", STEP_BUCKETS)
  end
  for _, start in ipairs(starts) do
    if not named(LIVE.key(start)) then
      LIVE.need(start)
    end
  end
  need_checked()
  local members, seen = {}, nil
  for _, start in ipairs(starts) do
    local left, bucket = LIVE.left(start), LIVE.key(start)
    local got
    if newest then
      got = redis.call("ZREVRANGEBYLEX", bucket, after == "" and "+" or "(" .. after, "-", "LIMIT", "0", room + left.n)
    else
      got = redis.call("ZRANGEBYLEX", bucket, after == "" and "-" or "(" .. after, "+", "LIMIT", "0", room + left.n)
    end
    for _, m in ipairs(got) do
      if #members == room then
        break
      end
      seen = m
      if not LIVE.listed(left, m) then
        members[#members + 1] = m
      end
    end
    if #members == room then
      break
    end
  end
  local out = listed_rows(members, "live")
  if #members < room and #starts == STEP_BUCKETS and seen then
    -- Its buckets ran out before its room: the next step goes on from the last seen.
    out[1], out[2] = "MORE", out[1] == "MORE" and out[2] or seen
  end
  return out
end)
