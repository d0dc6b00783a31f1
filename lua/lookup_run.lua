-- lookup_run: one run's whole state, read in one step.
--
-- KEYS[1] marks: agentplane:{<tenant>}:mark
-- KEYS[2] seals: agentplane:{<tenant>}:seal
-- KEYS[3] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[4] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[5] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[6] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[7] geometry: agentplane:{<tenant>}:buckets
-- KEYS[8] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- Then the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names
--   (NEED asks for more)
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
    local mark, held = mark_read(w.wid)
    waits[#waits + 1] = { sub_reply(run, w.effect, w.wid, w.attrs, w.rows), mark_parked_at(mark), held or "" }
  end
  local found, timers = run_timers(run), {}
  local pairs = timers_reply(found, {})
  for i, t in ipairs(found) do
    timers[3 * i - 2], timers[3 * i - 1] = pairs[2 * i - 1], pairs[2 * i]
    timers[3 * i] = redis.call("HGET", K.timer_claims, t.tid) or ""
  end
  return { "OK", redis.call("HGET", K.seals, run) or "", waits, timers }
end)
