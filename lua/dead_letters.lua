-- dead_letters: the tenant's dead rows, newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] payloads: agentplane:{<tenant>}:payload
-- KEYS[3] dead: agentplane:{<tenant>}:event:dead
-- ARGV[1] limit: count, at most this many rows
-- Returns: {"OK", {event row, has payload "1"/"0", payload JSON}, ...}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

return guard(function()
  local limit = bounded(ARGV[1])
  local members = redis.call("ZREVRANGE", K.dead, "0", limit - 1)
  local eids = {}
  for i, m in ipairs(members) do
    eids[i] = eid_after(m, 0)
  end
  -- Read-only: rows go back as stored; Python decodes and checks every field.
  local rows, payloads = hmget_all(K.events, eids), hmget_all(K.payloads, eids)
  local out = { "OK" }
  for i, raw in ipairs(rows) do
    if not raw or row_state(raw) ~= "dead" then
      corrupt("index", members[i], "dead index names a row that is not dead")
    end
    out[i + 1] = { raw, payloads[i] and "1" or "0", payloads[i] or "" }
  end
  return out
end)
