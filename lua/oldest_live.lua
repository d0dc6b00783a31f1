-- oldest_live: when the oldest live event was received.
--
-- KEYS[1] live: agentplane:{<tenant>}:event:live
-- Returns: {"OK"} | {"OK", received_at}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua

return guard(function()
  local first = redis.call("ZRANGE", K.live, "0", "0")[1]
  if not first then
    return words("OK")
  end
  if not string.find(string.sub(first, 1, INSTANT_WIDTH), "^%d+$") then
    corrupt("index", first, "live index member without an instant")
  end
  return words("OK", decimal(tonumber(string.sub(first, 1, INSTANT_WIDTH)) - 1e15))
end)
