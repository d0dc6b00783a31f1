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

-- Whether a sorts before b byte by byte (Lua's < on strings follows the locale).
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

return guard(function()
  local room, after, newest = bounded(ARGV[1]), ARGV[2], ARGV[3] == "newest"
  -- The cursor: the last row listed, instant(received_at) . eid.
  local after_at, after_eid = string.sub(after, 1, INSTANT_WIDTH), string.sub(after, INSTANT_WIDTH + 1)
  -- The buckets from the one holding the cursor on.
  local starts
  if newest then
    local from = after == "" and "+" or "[" .. after_at
    starts = redis.call("ZREVRANGEBYLEX", K.live_index, from, "-", "LIMIT", "0", STEP_BUCKETS)
  else
    local holding = after ~= "" and LIVE.holding(after_at)
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
    -- From the cursor's score on, those of its instant up to it passed over.
    local got, from, ties = nil, nil, 0
    if after ~= "" then
      from = string.format("%.0f", tonumber(after_at) - tonumber(start))
      ties = redis.call("ZCOUNT", bucket, from, from)
    end
    local limit = room + left.n + ties
    if newest then
      got = redis.call("ZREVRANGEBYSCORE", bucket, from or "+inf", "-inf", "WITHSCORES", "LIMIT", "0", limit)
    else
      got = redis.call("ZRANGEBYSCORE", bucket, from or "-inf", "+inf", "WITHSCORES", "LIMIT", "0", limit)
    end
    for i = 1, #got, 2 do
      if #members == room then
        break
      end
      local eid, score = got[i], got[i + 1]
      local past = true
      if score == from then -- at the cursor's instant: past it only after its eid
        past = eid ~= after_eid and before(eid, after_eid) == newest
      end
      if past then
        local m = instant_key(tonumber(start) + tonumber(score) - 1e15) .. eid
        seen = m
        if not LIVE.listed(left, eid) then
          members[#members + 1] = m
        end
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
