-- claim_for: find and claim a buffered event for one wait, or recover its own claim.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[5] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- KEYS[7] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[8] seals: agentplane:{<tenant>}:seal
-- KEYS[9] geometry: agentplane:{<tenant>}:buckets
-- KEYS[10] replies: agentplane:{<tenant>}:reply
-- KEYS[11] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>, agentplane:{<tenant>}:wait:order:<start>),
--   the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] subscription: run, effect, kind, step, phase, case, from_source ("" none), then (namespace, value) pairs
-- Returns: {"HIT", at, event row, has payload "1"/"0", payload JSON} | {"MISS", at} | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local sub = sub_args()
  -- The wait's attributes are read only where a claim parks it anew.
  return claim_reply(sub, function()
    return wait_read(sub.wid, sub.run)
  end, at)
end)
