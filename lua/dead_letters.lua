-- dead_letters: one step of the tenant's dead rows, newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] dead: agentplane:{<tenant>}:event:dead
-- ARGV[1] room: count, the most rows this step lists
-- ARGV[2] after: the dead index member of the last row the previous step listed, "" to start
-- Returns: {"OK" | "MORE", last member, event row as stored (its payload last), ...}
--   MORE: the step stopped at its budget of bytes before its room; call again after last
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

-- Rows and payloads one step returns, in bytes, at most (past its first row): a
-- step of payloads at max_payload_bytes stays within the contract's server time.
local STEP_BYTES = 1048576

return guard(function()
  local room, after = bounded(ARGV[1]), ARGV[2]
  local start = after == "" and "+" or "(" .. after
  local members = redis.call("ZREVRANGEBYLEX", K.dead, start, "-", "LIMIT", "0", room)
  local out, size = { "OK", "" }, 0
  for i, m in ipairs(members) do
    if size >= STEP_BYTES then
      out[1] = "MORE"
      break
    end
    local eid = eid_after(m, 0)
    local raw = redis.call("HGET", K.events, eid)
    -- Read-only: rows go back as stored; Python decodes and checks every field.
    if not raw or row_state(raw) ~= "dead" then
      corrupt("index", m, "dead index names a row that is not dead")
    end
    out[i + 2] = raw
    out[2] = m
    size = size + #raw
  end
  return out
end)
