-- sweep_unclaimed: one bounded step retiring live rows received at or before a cutoff.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_by_key: agentplane:{<tenant>}:event:live:key
-- KEYS[4] live_by_sender: agentplane:{<tenant>}:event:live:sender
-- KEYS[5] dead: agentplane:{<tenant>}:event:dead
-- ARGV[1] older_than: instant ms, inclusive cutoff
-- ARGV[2] reason: the dead-letter reason, verbatim
-- ARGV[3] batch: count, the most rows this step retires
-- Returns: {"OK", rows retired}
-- Errors: CORRUPT

local K = {
  events = KEYS[1],
  live = KEYS[2],
  live_by_key = KEYS[3],
  live_by_sender = KEYS[4],
  dead = KEYS[5],
}

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua

return guard(function()
  local older_than, reason, batch = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
  -- Retired rows leave the live index, so every step starts from the oldest.
  local members = redis.call("ZRANGEBYLEX", K.live, "-", "(" .. instant_key(older_than + 1), "LIMIT", 0, batch)
  local rows = {}
  for i, m in ipairs(members) do
    local eid = eid_after(m, 0)
    local f = event_read(eid)
    if not f or f[E_STATE] ~= "live" then
      corrupt("index", m, "live index names a row that is not live")
    end
    rows[i] = { eid = eid, f = f }
  end
  for _, r in ipairs(rows) do
    kill(r.eid, r.f, reason)
  end
  return { "OK", #rows }
end)
