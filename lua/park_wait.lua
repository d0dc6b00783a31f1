-- park_wait: register a wait as subscribe does and set its parked mark.
--
-- KEYS[1] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[2] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[3] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[4] marks: agentplane:{<tenant>}:mark
-- KEYS[5] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[6] seals: agentplane:{<tenant>}:seal
-- KEYS[7] wake: agentplane:{<tenant>}:wake
-- KEYS[8] geometry: agentplane:{<tenant>}:buckets
-- KEYS[9] replies: agentplane:{<tenant>}:reply
-- KEYS[10] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more); and the two the next split of the wait
--   buckets writes
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
  -- A registered wait's rows leave the election as it parks.
  local read = { wait_read(sub.wid, sub.run) }
  election_checked(read[1], read[2])
  need_checked()
  local attrs, mark, sealed, _, stored, rows = register(sub.run, sub.wid, sub_attrs(), sub.nv, at, false, read)
  -- A wait holding a claim keeps it.
  park(sub.run, sub.wid, attrs, at, not stored and UNLISTED or rows, sealed, mark_held(mark))
  wake("r") -- for the redelivery pass of a blocked worker
  return words("OK", decimal(at))
end)
