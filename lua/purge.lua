-- purge: one bounded step removing dead and consumed rows received at or before a cutoff.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] payloads: agentplane:{<tenant>}:payload
-- KEYS[3] dead: agentplane:{<tenant>}:event:dead
-- KEYS[4] consumed: agentplane:{<tenant>}:event:consumed
-- ARGV[1] older_than: instant ms, inclusive cutoff
-- ARGV[2] batch: count, the most rows this step removes
-- Returns: {"OK", rows removed}
-- Errors: CORRUPT

local K = {
  events = KEYS[1],
  payloads = KEYS[2],
  dead = KEYS[3],
  consumed = KEYS[4],
}

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

return guard(function()
  local older_than, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
  local bound = "(" .. instant_key(older_than + 1)
  local dead = redis.call("ZRANGEBYLEX", K.dead, "-", bound, "LIMIT", 0, batch)
  local consumed = redis.call("ZRANGEBYLEX", K.consumed, "-", bound, "LIMIT", 0, batch)
  -- Oldest first across both: merge the two ordered runs by bytes.
  local chosen, i, j = {}, 1, 1
  while #chosen < batch and (dead[i] or consumed[j]) do
    if consumed[j] == nil or (dead[i] ~= nil and bytes_lt(dead[i], consumed[j])) then
      chosen[#chosen + 1] = { index = K.dead, member = dead[i], state = "dead" }
      i = i + 1
    else
      chosen[#chosen + 1] = { index = K.consumed, member = consumed[j], state = "consumed" }
      j = j + 1
    end
  end
  for _, c in ipairs(chosen) do
    c.eid = eid_after(c.member, 0)
    local f = event_read(c.eid)
    if not f or f[E_STATE] ~= c.state then
      corrupt("index", c.member, "retention index names a row in another state")
    end
  end
  for _, c in ipairs(chosen) do
    local key = c.index
    redis.call("ZREM", key, c.member)
    redis.call("HDEL", K.events, c.eid)
    redis.call("HDEL", K.payloads, c.eid)
  end
  return { "OK", #chosen }
end)
