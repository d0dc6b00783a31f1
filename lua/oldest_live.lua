-- oldest_live: when the oldest live event was received.
--
-- KEYS[1] live: agentplane:{<tenant>}:event:live
-- KEYS[2] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[3] geometry: agentplane:{<tenant>}:buckets
-- Then the live buckets (agentplane:{<tenant>}:event:live:<start>) the call reads, as many as it names
--   (NEED asks for more)
-- Returns: {"OK"} | {"OK", received_at} | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

return guard(function()
  -- The oldest buckets, four at a time, until one holds a row that has not
  -- left it (a bucket of only such rows is one whose tidying is due).
  for first = 0, 1e9, 4 do
    local starts = redis.call("ZRANGEBYLEX", K.live_index, "-", "(~", "LIMIT", first, 4)
    if #starts == 0 then
      return words("OK")
    end
    for _, start in ipairs(starts) do
      if not named(TIME.live:key(start)) then
        TIME.live:need(start)
      end
    end
    need_checked()
    for _, start in ipairs(starts) do
      local left, bucket = TIME.live:left(start), TIME.live:key(start)
      local first = redis.call("ZRANGE", bucket, 0, left.n, "WITHSCORES")
      for i = 1, #first, 2 do
        if not TIME.listed(left, first[i]) then
          return words("OK", decimal(tonumber(start) + tonumber(first[i + 1]) - 1e15))
        end
      end
    end
  end
end)
