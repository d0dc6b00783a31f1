-- wait: subscribe, then claim a buffered event for the wait, in one step.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_by_key: agentplane:{<tenant>}:event:live:key
-- KEYS[4] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[5] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[6] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[7] electable: agentplane:{<tenant>}:wait:match
-- KEYS[8] electable_by_sender: agentplane:{<tenant>}:wait:match:sender
-- KEYS[9] marks: agentplane:{<tenant>}:mark
-- KEYS[10] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[11] seals: agentplane:{<tenant>}:seal
-- KEYS[12] replies: agentplane:{<tenant>}:reply
-- KEYS[13] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] subscription: run, effect, kind, step, phase, case, from_source ("" none), then (namespace, value) pairs
-- Returns: {"HIT", at, event row, has payload "1"/"0", payload JSON} | {"MISS", at}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local sub = sub_args()
  -- Registered first (the ordering rule), but put up for election only if the
  -- search misses: a hit parks the wait at once.
  local attrs, marked, sealed, added, stored, rows = register(sub.run, sub.wid, sub_attrs(), sub.nv, at, false)
  local reply = claim_reply(sub, attrs, at, marked, not stored and UNLISTED or rows, sealed)
  -- A miss writes nothing, so marked and sealed still hold.
  if reply[1] == "MISS" and not marked and not sealed then
    elect_new(sub.wid, attrs, added, at)
  end
  return reply
end)
