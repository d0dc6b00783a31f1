-- parked_waits: one bounded step: retire sealed runs' marks, else list parked waits.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[3] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[4] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[5] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[6] geometry: agentplane:{<tenant>}:buckets
-- KEYS[7] marks: agentplane:{<tenant>}:mark
-- KEYS[8] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[9] replies: agentplane:{<tenant>}:reply
-- KEYS[10] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] room: count, the most waits this step lists
-- ARGV[2] after_run: the run of the last wait listed by the previous step, "" to start
-- ARGV[3] after_effect: its effect
-- ARGV[4] batch: count, the most sealed marks this step retires
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"MORE"} (retired a full batch; call again) | {"LIST" | "PART", last run, last effect, subscription, ...}
--   PART: the listing stopped at its budget of keys or bytes before its room; call again after the last
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

-- The correlation keys one step lists, and the bytes of their key rows, at
-- most (past its first wait): a key row repeats its wait's identifiers and
-- attributes, so waits of long ones go fewer a step.
local LIST_KEYS, LIST_BYTES = 256, 131072

return guard(function()
  local room, batch = bounded(ARGV[1]), bounded(ARGV[4])
  -- Sealed runs' marks first: every call retires them all, past a full page.
  local sealed = redis.call("ZRANGEBYLEX", K.mark_index, "[S", "(S\255", "LIMIT", "0", batch)
  if #sealed > 0 then
    local waits, claims, wids = {}, {}, {}
    for i, m in ipairs(sealed) do
      wids[i] = string.sub(m, 2)
      WAIT.bucket(wid_run(wids[i])) -- their wait buckets, named at once
    end
    need_checked()
    for i, mark in ipairs(hmget_all(K.marks, wids)) do
      local wid, held = wids[i], mark_held(mark)
      local attrs, rows = wait_read(wid)
      waits[i] = { wid = wid, attrs = attrs, rows = rows }
      if held then
        local f = event_read(held)
        if not f or f[E_STATE] ~= "held" or enc_pair(f[E_RUN], f[E_EFFECT]) ~= wid then
          corrupt("claim", wid, "mark names a row not held for its wait")
        end
        claims[#claims + 1] = { eid = held, f = f }
      end
    end
    for _, w in ipairs(waits) do
      if w.attrs then
        w.rows = TIME.order.checked(w.wid, w.rows)
      end
    end
    need_checked()
    -- Each retired wait's claim is shed with its mark; the run's other marks
    -- keep theirs until their own step.
    for _, w in ipairs(waits) do
      retire_wait(w.wid, w.attrs, w.rows)
    end
    for _, c in ipairs(claims) do
      shed(c.eid, c.f)
    end
    if #sealed == batch then
      return words("MORE")
    end
  end
  -- Then the listable marks (registered waits of unsealed runs), in (run, effect) order.
  local start = "[L"
  if ARGV[2] ~= "" then
    start = "(L" .. enc_pair(ARGV[2], ARGV[3])
  end
  local out, listed, size = { "LIST", ARGV[2], ARGV[3] }, 0, 0
  local marks = redis.call("ZRANGEBYLEX", K.mark_index, start, "(L\255", "LIMIT", "0", room)
  for _, m in ipairs(marks) do
    WAIT.bucket(wid_run(string.sub(m, 2))) -- their wait buckets, named at once
  end
  need_checked()
  for _, m in ipairs(marks) do
    if listed >= LIST_KEYS or size >= LIST_BYTES then
      out[1] = "PART"
      break
    end
    local wid = string.sub(m, 2)
    local run, effect = wid_parts(wid)
    local attrs, rows = wait_read(wid)
    if not attrs then
      corrupt("mark", wid, "listed mark of an unregistered wait")
    end
    out[2], out[3] = run, effect
    local sub = sub_reply(run, effect, wid, attrs, rows)
    out[#out + 1] = sub
    listed = listed + #sub[4] / 2
    for _, row in ipairs(rows) do
      size = size + #wid + #attrs[A_TEXT] + #row.nv + INSTANT_WIDTH
    end
  end
  return out
end)
