-- revive: a dead letter back to live, then offered to the oldest eligible wait.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] marks: agentplane:{<tenant>}:mark
-- KEYS[6] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[7] geometry: agentplane:{<tenant>}:buckets
-- KEYS[8] replies: agentplane:{<tenant>}:reply
-- KEYS[9] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock: the row's new received_at
-- ARGV[2] source: the event's source
-- ARGV[3] id: the event's id
-- Returns: {"RESUMED", at, subscription} | {"BUFFERED", at} | {"NONE", at} (no dead row) | {"NEED", geometry, bucket, ...}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local eid = enc_pair(ARGV[2], ARGV[3])
  local f = event_read(eid)
  if not f or f[E_STATE] ~= "dead" then
    return words("NONE", decimal(at))
  end
  local dead = f[E_RECEIVED] .. eid
  -- Identity, keys, minter and payload stay (an erased one stays null); the row
  -- is received anew at `at`, so the sweep gives it a whole grace period, and it
  -- is matched as a broadcast delivery is. A live row is never erased, so an
  -- erased one's null, kept as no text, becomes the JSON null it reads as.
  if f[E_ERASED] == "1" then
    f[#f] = "null"
  end
  f[E_RECEIVED], f[E_REASON], f[E_ERASED], f[E_TARGETED] = instant_key(at), "", "0", "0"
  -- Buffered live unless elected: its key buckets are checked before any write.
  local entries = live_entries_of(eid, f)
  need_checked()
  f[E_STATE] = "held" -- until elected (which checks its buckets before it writes)
  local sub = elect(eid, f, at)
  redis.call("ZREM", K.dead, dead)
  if sub then
    return sub_status("RESUMED", decimal(at), sub)
  end
  f[E_STATE] = "live"
  event_write(eid, f)
  live_index(eid, f, true, entries)
  return words("BUFFERED", decimal(at))
end)
