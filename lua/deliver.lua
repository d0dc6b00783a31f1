-- deliver: buffer an event, then offer it to the oldest eligible wait, in one step.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] marks: agentplane:{<tenant>}:mark
-- KEYS[5] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[6] geometry: agentplane:{<tenant>}:buckets
-- KEYS[7] replies: agentplane:{<tenant>}:reply
-- KEYS[8] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more); and the two the next split of the key
--   buckets writes
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] event: source, id, kind, payload JSON, minter actor, minter basis ("" none), then (namespace, value) pairs
-- Returns: {"RESUMED", at, subscription} | {"BUFFERED", at} | {"DUPLICATE", at} | {"NEED", geometry, bucket, ...}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

-- The usual delivery, resumed field by field: a new event of one key whose
-- oldest wait is of any sender and of one key row, in buckets the call named.
-- Holds the new row for that wait and parks it (park: its election entry goes);
-- returns the subscription (sub_reply's). Answers false, having written
-- nothing, when no wait is up for the key (the event is buffered); NEED, having
-- written nothing, when the call did not name the oldest wait's bucket; and nil
-- for any other case, which the general election decides.
local function resumed_usual(event, at)
  local nv = event.nv[1]
  if #event.nv ~= 1 then
    return nil
  end
  local kind = enc(event.kind)
  local h, key = key_bucket(kind .. nv) -- its key bucket
  if not key then
    return nil
  end
  local entry, own, any = WAIT.heads(key, h, enc(event.source))
  if own then
    return nil -- waits of this sender too: the general election merges both
  end
  if not entry then
    return false
  end
  local created, wid = string.sub(entry, #any + 1, #any + INSTANT_WIDTH), string.sub(entry, #any + INSTANT_WIDTH + 1)
  local first, second = wid_ends(wid)
  local run = unescape(string.sub(wid, 1, first - 1))
  -- Its row, in a wait bucket the call named (found there, the bucket is
  -- current: no hash of the run, no geometry); else in its run's bucket, and
  -- where the call did not name that (a store that registered none of the
  -- waits), NEED, as the election would answer, before more work.
  local bucket, m = WAIT.found(wid)
  if not bucket then
    bucket = WAIT.named(run)
    m = redis.call("HGET", bucket, wid)
  end
  -- Of this kind, with this one key row: its attributes' four components, then the row.
  local cut = m and #m - #nv - INSTANT_WIDTH
  if not m or string.sub(m, 1, #kind) ~= kind or string.sub(m, cut + 1) ~= nv .. created then
    return nil
  end
  local e = string.find(m, TERM, #kind + 1, true) -- its step and phase end
  e = e and string.find(m, TERM, e + 1, true) -- its case
  if not e or string.find(m, TERM, e + 1, true) ~= cut then
    return nil
  end
  local effect, attrs = unescape(string.sub(wid, first + 1, second - 1)), { string.sub(m, 1, cut), kind, TERM }
  local f = new_event_row(event, at, "held", run, effect, "0")
  f.wid = wid
  event_write(event.eid, f)
  park(run, wid, attrs, at, { { nv = nv, at = created } }, false, event.eid)
  return { run, effect, attrs[A_TEXT], { event.keys[1], event.keys[2] } }
end

return guard(function()
  local at = instant_arg(ARGV[1])
  local event = event_args(2)
  local f = event_read(event.eid)
  if not f then
    -- A new event goes straight to the wait it resumes (held: it never enters
    -- the live indexes), or is buffered live.
    local sub = resumed_usual(event, at)
    if sub == nil then
      f = new_event_row(event, at, "held", "", "", "0")
      sub = elect(event.eid, f, at, event.nv)
    end
    if not sub then
      insert_event(event, at, "live", "", "", "0")
      return words("BUFFERED", decimal(at))
    end
    return sub_status("RESUMED", decimal(at), sub)
  end
  if f[E_STATE] ~= "live" then
    return words("DUPLICATE", decimal(at))
  end
  -- A live duplicate is offered again: that heals a crash after buffer.
  local sub = elect(event.eid, f, at)
  if sub then
    return sub_status("RESUMED", decimal(at), sub)
  end
  return words("DUPLICATE", decimal(at))
end)
