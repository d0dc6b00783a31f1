-- lookup_run: one run's whole state, read in one step.
--
-- KEYS[1] wait_keys: agentplane:{<tenant>}:wait:key
-- KEYS[2] marks: agentplane:{<tenant>}:mark
-- KEYS[3] seals: agentplane:{<tenant>}:seal
-- KEYS[4] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[5] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[6] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[7] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[8] geometry: agentplane:{<tenant>}:buckets
-- KEYS[9] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- ARGV[1] run: the run
-- Returns: {"OK", sealed_at or "", {{subscription, parked_at or "", held eid or ""}, ...},
--   {member, fire_at, claim "claimed_at lease claims" or "", ...}}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua
--@include _lib/timers.lua

return guard(function()
  local run = ARGV[1]
  local waits = {}
  for _, w in ipairs(run_waits(run)) do
    local attrs, rows = wait_read(w.wid)
    local mark, held = mark_read(w.wid)
    waits[#waits + 1] = { sub_reply(run, w.effect, w.wid, attrs, rows), mark_parked_at(mark), held or "" }
  end
  local found, timers = run_timers(run), {}
  local pairs = timers_reply(found, {})
  for i, t in ipairs(found) do
    timers[3 * i - 2], timers[3 * i - 1] = pairs[2 * i - 1], pairs[2 * i]
    timers[3 * i] = redis.call("HGET", K.timer_claims, t.tid) or ""
  end
  return { "OK", redis.call("HGET", K.seals, run) or "", waits, timers }
end)
