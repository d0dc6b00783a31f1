-- dead_letters: the tenant's dead rows, newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] payloads: agentplane:{<tenant>}:payload
-- KEYS[3] dead: agentplane:{<tenant>}:event:dead
-- ARGV[1] limit: count, at most this many rows
-- Returns: {"OK", {event row, has payload "1"/"0", payload JSON}, ...}
-- Errors: CORRUPT

local K = {
  events = KEYS[1],
  payloads = KEYS[2],
  dead = KEYS[3],
}

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

return guard(function()
  local limit = tonumber(ARGV[1])
  local out = { "OK" }
  for _, m in ipairs(redis.call("ZREVRANGE", K.dead, 0, limit - 1)) do
    local eid = eid_after(m, 0)
    local f = event_read(eid)
    if not f or f[E_STATE] ~= "dead" then
      corrupt("index", m, "dead index names a row that is not dead")
    end
    out[#out + 1] = event_reply(eid, f)
  end
  return out
end)
