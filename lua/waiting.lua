-- waiting: the tenant's wait key rows in registration order.
--
-- KEYS[1] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[2] wait_order: agentplane:{<tenant>}:wait:order
-- ARGV[1] limit: count, at most this many key rows
-- ARGV[2] after: the order member of the last row a previous page listed, "" to start
-- Returns: {"OK", last member or "", {run, effect, attributes text, namespace, value}, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua

return guard(function()
  local limit, after = bounded(ARGV[1]), ARGV[2]
  local start = after == "" and "-" or "(" .. after
  local members = redis.call("ZRANGEBYLEX", K.wait_order, start, "+", "LIMIT", "0", limit)
  local parts, wids = {}, {}
  for i, m in ipairs(members) do
    parts[i] = take(m, INSTANT_WIDTH + 1, 4)
    if not parts[i] then
      corrupt("wait key", m, "bad member")
    end
    wids[i] = parts[i][1] .. parts[i][2]
  end
  -- Read-only: Python decodes and checks the attributes text.
  local out, rows = { "OK", members[#members] or "" }, {}
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
