-- lookup_timer: one armed timer, with its claim.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[3] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[4] geometry: agentplane:{<tenant>}:buckets
-- KEYS[5] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- Returns: {"TIMER", member, fire_at, claim "claimed_at lease claims" or ""} | {"NONE"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  local tid = enc_pair(ARGV[1], ARGV[2])
  local attrs = redis.call("HGET", K.timer_bucket, tid)
  if not attrs then
    -- Not in the bucket named: where the client named it by an older geometry,
    -- the row may have moved (BUCKETS). A row found proves its bucket current,
    -- since a split moves each row it moves in one step.
    timer_geometry()
    return { "NONE" }
  end
  local out = timers_reply({ { tid = tid, m = timer_member(tid, attrs) } }, { "TIMER" })
  out[4] = redis.call("HGET", K.timer_claims, tid) or ""
  return out
end)
