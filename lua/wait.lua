-- wait: subscribe, then claim a buffered event for the wait, in one step.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[5] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[6] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[7] marks: agentplane:{<tenant>}:mark
-- KEYS[8] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[9] seals: agentplane:{<tenant>}:seal
-- KEYS[10] geometry: agentplane:{<tenant>}:buckets
-- KEYS[11] replies: agentplane:{<tenant>}:reply
-- KEYS[12] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>, agentplane:{<tenant>}:wait:order:<start>),
--   the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more);
--   and the two the next split of the wait buckets writes
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
  -- The search only reads, so it goes first: the buckets of the event it finds
  -- are checked before anything is written.
  local eid, f = claim_search(sub.kind, sub.from, sub.nv)
  -- The election entries it may write: of its keys, put up on a miss, and of
  -- a registered wait's rows, taken out as a hit parks it.
  local read = { wait_read(sub.wid, sub.run) }
  local in_force = read[1] or sub_attrs()
  election_checked(in_force, sub.nv)
  election_checked(in_force, read[2])
  need_checked()
  -- Registered before the claim (the ordering rule), but put up for election
  -- only if the search misses: a hit parks the wait at once.
  local attrs, marked, sealed, added, stored, rows = register(sub.run, sub.wid, in_force, sub.nv, at, false, read)
  local found = { eid = eid, f = f }
  local reply = claim_reply(sub, attrs, at, marked, not stored and UNLISTED or rows, sealed, found)
  -- A miss writes nothing, so marked and sealed still hold.
  if reply[1] == "MISS" and not marked and not sealed then
    elect_new(sub.wid, attrs, added, at)
  end
  return reply
end)
