-- waiting: the tenant's wait key rows in registration order.
--
-- KEYS[1] waits: agentplane:{<tenant>}:wait
-- KEYS[2] wait_order: agentplane:{<tenant>}:wait:order
-- ARGV[1] limit: count, at most this many key rows
-- Returns: {"OK", {run, effect, attributes row, namespace, value}, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/waits.lua

return guard(function()
  local limit = tonumber(ARGV[1])
  local members = redis.call("ZRANGE", K.wait_order, "0", limit - 1)
  local parts, wids = {}, {}
  for i, m in ipairs(members) do
    parts[i] = take(m, INSTANT_WIDTH + 1, 4)
    if not parts[i] then
      corrupt("wait key", m, "bad member")
    end
    wids[i] = parts[i][1] .. parts[i][2]
  end
  -- Read-only: attributes go back as stored; Python decodes and checks them.
  local out = { "OK" }
  for i, raw in ipairs(hmget_all(K.waits, wids)) do
    if not raw then
      corrupt("wait key", members[i], "order entry of an unregistered wait")
    end
    local p = parts[i]
    out[i + 1] = { dec(p[1]), dec(p[2]), raw, dec(p[3]), dec(p[4]) }
  end
  return out
end)
