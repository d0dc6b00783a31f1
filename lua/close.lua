-- close: seal a run, retire every wait and claim of it, and disarm its timers, in one step.
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
-- KEYS[11] seals: agentplane:{<tenant>}:seal
-- KEYS[12] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[13] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[14] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[15] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[16] geometry: agentplane:{<tenant>}:buckets
-- KEYS[17] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[18] replies: agentplane:{<tenant>}:reply
-- KEYS[19] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>, agentplane:{<tenant>}:wait:order:<start>),
--   the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2] run: the run
-- ARGV[3..] unanswered: effects whose answer the journal lacks
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", waits retired, {released event, ...}, timers removed, newly sealed "1"/"0"} | {"NEED", geometry, bucket, ...}
--   released event = {event row, has payload "1"/"0", payload JSON}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua
--@include _lib/timers.lua

return guard(function()
  local at, run, unanswered = instant_arg(ARGV[1]), ARGV[2], {}
  for i = 3, #ARGV do
    unanswered[ARGV[i]] = true
  end
  -- Its timers are read first: reading them may answer NEED, and the usual
  -- run's wait is retired at once. The geometry first, in one read for all
  -- the families (key_geometry).
  key_geometry()
  local timers = run_timers(run)
  local usual, wids, marked, flat = WAIT.retired_usual_run(run, unanswered)
  local state = not usual and read_run(run, wids, marked, flat)
  if state then
    releases_checked(state, unanswered)
  end
  -- Everything the seal would re-index is retired, so only the marker is
  -- written, where the run has none.
  local newly = redis.call("HSETNX", K.seals, run, decimal(at)) == 1 and "1" or "0"
  local waits, released = 1, {}
  if state then
    waits, released = retire_run(run, unanswered, state)
  end
  timers_delete(timers)
  local reply = { "OK", waits, released, #timers, newly }
  if usual then -- with the text remember would make of it
    reply.text = "*5:$2:OK:1;*0::" .. decimal(#timers) .. ";$1:" .. newly
  end
  return reply
end)
