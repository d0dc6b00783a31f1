-- unsubscribe_run: retire every wait of a concluded run; release or shed its claims.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] payloads: agentplane:{<tenant>}:payload
-- KEYS[3] live: agentplane:{<tenant>}:event:live
-- KEYS[4] live_by_key: agentplane:{<tenant>}:event:live:key
-- KEYS[5] dead: agentplane:{<tenant>}:event:dead
-- KEYS[6] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[7] ledger: agentplane:{<tenant>}:claim
-- KEYS[8] ledger_by_run: agentplane:{<tenant>}:claim:run
-- KEYS[9] waits: agentplane:{<tenant>}:wait
-- KEYS[10] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[11] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[12] electable: agentplane:{<tenant>}:wait:match
-- KEYS[13] electable_by_sender: agentplane:{<tenant>}:wait:match:sender
-- KEYS[14] marks: agentplane:{<tenant>}:mark
-- KEYS[15] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[16] replies: agentplane:{<tenant>}:reply
-- KEYS[17] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the run
-- ARGV[2..] unanswered: effects whose answer the journal lacks
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", waits retired, {released event, ...}}
--   released event = {event row, has payload "1"/"0", payload JSON}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

return guard(function()
  local run, unanswered = ARGV[1], {}
  for i = 2, #ARGV do
    unanswered[ARGV[i]] = true
  end
  local waits, released = retire_run(run, unanswered, read_run(run))
  return { "OK", waits, released }
end)
