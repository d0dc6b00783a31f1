-- unsubscribe: retire one wait and shed the claim made for it, if any.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[3] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[4] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[5] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- KEYS[7] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[8] geometry: agentplane:{<tenant>}:buckets
-- KEYS[9] replies: agentplane:{<tenant>}:reply
-- KEYS[10] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] run: the wait's run
-- ARGV[2] effect: the wait's effect
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local run, effect = ARGV[1], ARGV[2]
  local wid = enc_pair(run, effect)
  local bucket, m = WAIT.found(wid)
  if not bucket then
    bucket = WAIT.named(run)
    m = redis.call("HGET", bucket, wid)
  end
  local mark = redis.call("HGET", K.marks, wid)
  if m and WAIT.retire_usual(wid, bucket, m, mark) then
    return words("OK")
  end
  local attrs, rows
  if m then
    attrs, rows = wait_parse(wid, m)
  end
  local held = mark_held(mark)
  if not mark then -- unparked, it leaves the election
    election_checked(attrs, rows)
  end
  if attrs then
    rows = TIME.order.checked(wid, rows)
  end
  need_checked()
  local f = held and event_read(held)
  if held and (not f or f[E_STATE] ~= "held" or f[E_RUN] ~= run or f[E_EFFECT] ~= effect) then
    corrupt("claim", wid, "mark names a row not held for its wait")
  end
  retire_wait(wid, attrs, rows)
  -- Only this wait's claim is shed (its mark went with the wait); the run's
  -- other waits keep theirs.
  if held then
    shed(held, f)
  end
  return words("OK")
end)
