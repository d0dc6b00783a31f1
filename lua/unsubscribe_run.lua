-- unsubscribe_run: retire every wait of a concluded run; release or shed its claims.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[6] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[7] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[8] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[9] marks: agentplane:{<tenant>}:mark
-- KEYS[10] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[11] geometry: agentplane:{<tenant>}:buckets
-- KEYS[12] replies: agentplane:{<tenant>}:reply
-- KEYS[13] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>, agentplane:{<tenant>}:wait:order:<start>),
--   the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] run: the run
-- ARGV[2..] unanswered: effects whose answer the journal lacks
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", waits retired, {released event, ...}} | {"NEED", geometry, bucket, ...}
--   released event = {event row, has payload "1"/"0", payload JSON}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local run, unanswered = ARGV[1], {}
  for i = 2, #ARGV do
    unanswered[ARGV[i]] = true
  end
  local usual, wids, marked, flat = WAIT.retired_usual_run(run, unanswered)
  if usual then -- with the text remember would make of it
    return { "OK", 1, {}, text = "*3:$2:OK:1;*0:" }
  end
  local waits, released = retire_run(run, unanswered, read_run(run, wids, marked, flat))
  return { "OK", waits, released }
end)
