-- waiting: the tenant's wait key rows in registration order.
--
-- KEYS[1] waits: agentplane:{<tenant>}:wait
-- KEYS[2] wait_order: agentplane:{<tenant>}:wait:order
-- ARGV[1] limit: count, at most this many key rows
-- Returns: {"OK", {run, effect, attributes row, namespace, value}, ...}
-- Errors: CORRUPT

local K = {
  waits = KEYS[1],
  wait_order = KEYS[2],
}

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/waits.lua

return guard(function()
  local limit = tonumber(ARGV[1])
  local out = { "OK" }
  for _, m in ipairs(redis.call("ZRANGE", K.wait_order, 0, limit - 1)) do
    local parts = take(m, INSTANT_WIDTH + 1, 4)
    local attrs = parts and wait_read(parts[1] .. parts[2])
    if not attrs then
      corrupt("wait key", m, "order entry of an unregistered wait")
    end
    out[#out + 1] = { dec(parts[1]), dec(parts[2]), pack(attrs), dec(parts[3]), dec(parts[4]) }
  end
  return out
end)
