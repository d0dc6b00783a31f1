-- erase_payload: remove an event's payload for good, keeping its identity for dedup.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] marks: agentplane:{<tenant>}:mark
-- KEYS[6] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[7] seals: agentplane:{<tenant>}:seal
-- KEYS[8] geometry: agentplane:{<tenant>}:buckets
-- KEYS[9] replies: agentplane:{<tenant>}:reply
-- KEYS[10] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] source: the event's source
-- ARGV[2] id: the event's id
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"ERASED"} | {"NONE"} | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local eid = enc_pair(ARGV[1], ARGV[2])
  local f = event_read(eid)
  if not f then
    return words("NONE")
  end
  if f[E_ERASED] == "1" then
    return words("ERASED")
  end
  local unpark_list = {}
  if f[E_STATE] == "held" then
    -- The holder, and every other parked wait of its run that shares a key
    -- with the event and holds no claim of its own, become matchable again.
    local run, holder = f[E_RUN], enc_pair(f[E_RUN], f[E_EFFECT])
    local keys = nv_set(event_nv(f))
    if is_marked(holder) then
      local attrs, rows = wait_read(holder, run)
      unpark_list[1] = { wid = holder, attrs = attrs, rows = rows }
    end
    for _, w in ipairs(run_waits(run)) do
      local mark = w.wid ~= holder and redis.call("HGET", K.marks, w.wid)
      if mark and not mark_held(mark) then
        for _, row in ipairs(w.rows) do
          if keys[row.nv] then
            unpark_list[#unpark_list + 1] = { wid = w.wid, attrs = w.attrs, rows = w.rows }
            break
          end
        end
      end
    end
  end
  for _, w in ipairs(unpark_list) do
    election_checked(w.attrs, w.rows) -- unparked, they are up for election again
  end
  need_checked()
  f[E_ERASED], f[#f] = "1", ""
  if f[E_STATE] == "live" or f[E_STATE] == "held" then
    local run = f[E_RUN]
    kill(eid, f, "erased")
    for _, w in ipairs(unpark_list) do
      unpark(run, w.wid, w.attrs, w.rows)
    end
  else
    -- consumed or dead: only the payload and the mark change; a dead row keeps its reason.
    event_write(eid, f)
  end
  return words("ERASED")
end)
