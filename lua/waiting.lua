-- waiting: the tenant's wait key rows in registration order.
--
-- KEYS[1] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[2] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[3] geometry: agentplane:{<tenant>}:buckets
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] limit: count, at most this many key rows
-- ARGV[2] after: the cursor of the last row a previous page listed (created_at . order member, then a line end
--   and the ns value of the row where the page stopped inside a member's rows), "" to start
-- Returns: {"OK" | "MORE", last cursor or "", {run, effect, attributes text, namespace, value}, ...}
--   MORE: the step's buckets ran out before its limit; call again after the last | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua

-- Each order member lists its wait's key rows of its instant, in key order; a
-- page that fills inside them ends its cursor with the last one's key.
return guard(function()
  local limit = bounded(ARGV[1])
  local after, resume = ARGV[2], nil
  local cut = string.find(after, "\n", 1, true)
  if cut then
    after, resume = string.sub(after, 1, cut - 1), string.sub(after, cut + 1)
  end
  local members, ats, more = TIME.order:page(limit, after, false)
  if resume then -- the rest of the member the last page stopped in, first
    table.insert(members, 1, string.sub(after, INSTANT_WIDTH + 1))
    table.insert(ats, 1, string.sub(after, 1, INSTANT_WIDTH))
  end
  local wids = {}
  for i, m in ipairs(members) do
    local parts, pos = take(m, 1, 2)
    if not parts or (pos <= #m and string.sub(m, pos) ~= ats[i]) then
      corrupt("wait order", m, "bad member")
    end
    wids[i] = parts[1] .. parts[2]
    WAIT.bucket(dec(parts[1])) -- the page's wait buckets, named at once
  end
  need_checked()
  -- Read-only: Python decodes and checks the attributes text. The cursor: the
  -- last member listed whole (its instant and member), or the member the page
  -- filled inside and the key of its last row listed.
  local out, read, last = { more and "MORE" or "OK", "" }, {}, ""
  for i, wid in ipairs(wids) do
    local w = read[wid]
    if w == nil then
      local attrs, rows = wait_read(wid)
      w = attrs and { text = attrs[A_TEXT], rows = rows } or false
      if w then
        w.run, w.effect = wid_parts(wid)
      elseif not (i == 1 and resume) then -- (one a page stopped in may have gone since)
        corrupt("wait order", members[i], "order entry of an unregistered wait")
      end
      read[wid] = w
    end
    local at, listed, last_nv = ats[i], 0, nil
    for _, row in ipairs(w and w.rows or {}) do
      if row.at == at and (i > 1 or not resume or bytes_lt(resume, row.nv)) then
        if #out - 2 == limit then
          out[1], out[2] = "OK", last_nv and at .. members[i] .. "\n" .. last_nv or last
          return out
        end
        out[#out + 1] = { w.run, w.effect, w.text, dec(row.ns), dec(row.value) }
        listed, last_nv = listed + 1, row.nv
      end
    end
    if listed == 0 and not (i == 1 and resume) then
      corrupt("wait order", members[i], "order entry of no key row")
    end
    last = at .. members[i]
  end
  out[2] = more or last
  return out
end)
