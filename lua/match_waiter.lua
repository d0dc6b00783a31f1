-- match_waiter: offer a stored live event to the oldest eligible wait and claim it.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] payloads: agentplane:{<tenant>}:payload
-- KEYS[3] live: agentplane:{<tenant>}:event:live
-- KEYS[4] live_by_key: agentplane:{<tenant>}:event:live:key
-- KEYS[5] live_by_sender: agentplane:{<tenant>}:event:live:sender
-- KEYS[6] dead: agentplane:{<tenant>}:event:dead
-- KEYS[7] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[8] ledger: agentplane:{<tenant>}:claim
-- KEYS[9] ledger_by_run: agentplane:{<tenant>}:claim:run
-- KEYS[10] waits: agentplane:{<tenant>}:wait
-- KEYS[11] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[12] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[13] electable: agentplane:{<tenant>}:wait:match
-- KEYS[14] electable_by_sender: agentplane:{<tenant>}:wait:match:sender
-- KEYS[15] marks: agentplane:{<tenant>}:mark
-- KEYS[16] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[17] seals: agentplane:{<tenant>}:seal
-- KEYS[18] replies: agentplane:{<tenant>}:reply
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2] source: the event's source
-- ARGV[3] id: the event's id
-- Returns: {"MATCHED", at, subscription} | {"NONE", at}
--   subscription = {run, effect, attributes row, {namespace, value, ...}}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local eid = enc(ARGV[2]) .. enc(ARGV[3])
  local f = event_read(eid)
  if not f or f[E_STATE] ~= "live" then
    return words("NONE", decimal(at))
  end
  local sub = elect(eid, f, at)
  if sub then
    return { "MATCHED", decimal(at), sub }
  end
  return words("NONE", decimal(at))
end)
