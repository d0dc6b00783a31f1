-- deliver_to: deliver a continuation to one named run's qualifying wait, or store nothing.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] marks: agentplane:{<tenant>}:mark
-- KEYS[3] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[4] seals: agentplane:{<tenant>}:seal
-- KEYS[5] geometry: agentplane:{<tenant>}:buckets
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- Then the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2] run: the run the event is addressed to
-- ARGV[3..] event: source, id, kind, payload JSON, minter actor, minter basis ("" none), then (namespace, value) pairs
-- Returns: {"MATCHED", at, subscription} | {"DUPLICATE", at} | {"NOT_WAITING", at}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

-- The wait's key rows (wait_parse's) when it qualifies for an event of this
-- kind and source (both encoded) and key set; else nil.
local function qualifying_rows(attrs, rows, kind, source, keys)
  if not attrs or attrs[A_KIND] ~= kind or (attrs[A_FROM] ~= TERM and attrs[A_FROM] ~= source) then
    return nil
  end
  for _, row in ipairs(rows) do
    if keys[row.nv] then
      return rows
    end
  end
  return nil
end

return guard(function()
  local at = instant_arg(ARGV[1])
  local run = ARGV[2]
  local event = event_args(3)
  local f = event_read(event.eid)
  if f then
    -- A retry of a delivery that matched answers Matched again, without writing.
    if f[E_STATE] == "held" and f[E_RUN] == run then
      local wid = enc_pair(run, f[E_EFFECT])
      local attrs, all = wait_read(wid, run)
      local rows = qualifying_rows(attrs, all, enc(f[E_KIND]), enc(f[E_SOURCE]), nv_set(event_nv(f)))
      if rows then
        return sub_status("MATCHED", decimal(at), sub_reply(run, f[E_EFFECT], wid, attrs, rows))
      end
    end
    return words("DUPLICATE", decimal(at))
  end
  -- The smallest effect among the run's unparked qualifying waits wins.
  local keys, kind, source = nv_set(event.nv), enc(event.kind), enc(event.source)
  for _, w in ipairs(run_waits(run)) do
    if not is_marked(w.wid) then
      local attrs = w.attrs
      local rows = qualifying_rows(attrs, w.rows, kind, source, keys)
      if rows then
        election_checked(attrs, rows) -- parked, it leaves the election
        need_checked()
        local reply = sub_reply(run, w.effect, w.wid, attrs, rows)
        local row = new_event_row(event, at, "held", run, w.effect, "1")
        hold(event.eid, row, run, w.effect, w.wid, at)
        park(run, w.wid, attrs, at, rows, nil, event.eid)
        return sub_status("MATCHED", decimal(at), reply)
      end
    end
  end
  return words("NOT_WAITING", decimal(at))
end)
