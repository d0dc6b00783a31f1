-- subscribe: register a wait's missing correlation keys; a new wait takes these attributes.
--
-- KEYS[1] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[2] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[3] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[4] marks: agentplane:{<tenant>}:mark
-- KEYS[5] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[6] seals: agentplane:{<tenant>}:seal
-- KEYS[7] geometry: agentplane:{<tenant>}:buckets
-- KEYS[8] replies: agentplane:{<tenant>}:reply
-- KEYS[9] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more); and the two the next split of the key
--   buckets and of the wait buckets writes
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] subscription: run, effect, kind, step, phase, case, from_source ("" none), then (namespace, value) pairs
-- Returns: {"OK", at}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua

return guard(function()
  local at = instant_arg(ARGV[1])
  local sub = sub_args()
  register(sub.run, sub.wid, sub_attrs(), sub.nv, at, true)
  return words("OK", decimal(at))
end)
