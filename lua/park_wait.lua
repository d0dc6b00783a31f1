-- park_wait: register a wait as subscribe does and set its parked mark.
--
-- KEYS[1] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[2] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[3] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[4] electable: agentplane:{<tenant>}:wait:match
-- KEYS[5] electable_by_sender: agentplane:{<tenant>}:wait:match:sender
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- KEYS[7] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[8] seals: agentplane:{<tenant>}:seal
-- KEYS[9] wake: agentplane:{<tenant>}:wake
-- KEYS[10] replies: agentplane:{<tenant>}:reply
-- KEYS[11] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] subscription: run, effect, kind, step, phase, case, from_source ("" none), then (namespace, value) pairs
-- Returns: {"OK", at}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/waits.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local sub = sub_args()
  local attrs, mark, sealed, _, stored, rows = register(sub.run, sub.wid, sub_attrs(), sub.nv, at, false)
  -- A wait holding a claim keeps it.
  park(sub.run, sub.wid, attrs, at, not stored and UNLISTED or rows, sealed, mark_held(mark))
  wake("r") -- for the redelivery pass of a blocked worker
  return words("OK", decimal(at))
end)
