-- waiting: the tenant's wait key rows in registration order.
--
-- KEYS[1] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[2] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[3] geometry: agentplane:{<tenant>}:buckets
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] limit: count, at most this many key rows
-- ARGV[2] after: the cursor of the last row a previous page listed (created_at . wid . ns value), "" to start
-- Returns: {"OK" | "MORE", last cursor or "", {run, effect, attributes text, namespace, value}, ...}
--   MORE: the step's buckets ran out before its limit; call again after the last | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua

return guard(function()
  local limit = bounded(ARGV[1])
  local members, ats, more = TIME.order:page(limit, ARGV[2], false)
  local parts, wids = {}, {}
  for i, m in ipairs(members) do
    parts[i] = take(m, 1, 4)
    if not parts[i] then
      corrupt("wait key", m, "bad member")
    end
    wids[i] = parts[i][1] .. parts[i][2]
    WAIT.bucket(unescape(string.sub(parts[i][1], 1, -2))) -- the page's wait buckets, named at once
  end
  need_checked()
  -- Read-only: Python decodes and checks the attributes text. The cursor: the
  -- last row's instant and member.
  local last = #members > 0 and ats[#ats] .. members[#members] or ""
  local out, rows = { more and "MORE" or "OK", more or last }, {}
  for i, wid in ipairs(wids) do
    if rows[wid] == nil then
      local attrs = wait_read(wid)
      rows[wid] = attrs and attrs[A_TEXT] or false
    end
    if not rows[wid] then
      corrupt("wait key", members[i], "order entry of an unregistered wait")
    end
    local p = parts[i]
    out[i + 2] = { dec(p[1]), dec(p[2]), rows[wid], dec(p[3]), dec(p[4]) }
  end
  return out
end)
