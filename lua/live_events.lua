-- live_events: one step of the tenant's live events, oldest or newest first.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- ARGV[1] room: count, the most rows this step lists
-- ARGV[2] after: the live index member of the last row the previous step listed, "" to start
-- ARGV[3] order: "oldest" or "newest" first
-- Returns: {"OK" | "MORE", last member, event row as stored (its payload last), ...}
--   MORE: the step stopped at its budget of bytes before its room; call again after last
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

-- Rows one step returns, in bytes, at most (past its first row).
local STEP_BYTES = 1048576

return guard(function()
  local room, after, newest = bounded(ARGV[1]), ARGV[2], ARGV[3] == "newest"
  local members
  if newest then
    local start = after == "" and "+" or "(" .. after
    members = redis.call("ZREVRANGEBYLEX", K.live, start, "-", "LIMIT", "0", room)
  else
    local start = after == "" and "-" or "(" .. after
    members = redis.call("ZRANGEBYLEX", K.live, start, "+", "LIMIT", "0", room)
  end
  local out, size = { "OK", "" }, 0
  for i, m in ipairs(members) do
    if size >= STEP_BYTES then
      out[1] = "MORE"
      break
    end
    local raw = redis.call("HGET", K.events, eid_after(m, 0))
    -- Read-only: rows go back as stored; Python decodes and checks every field.
    if not raw or row_state(raw) ~= "live" then
      corrupt("index", m, "live index names a row that is not live")
    end
    out[i + 2] = raw
    out[2] = m
    size = size + #raw
  end
  return out
end)
