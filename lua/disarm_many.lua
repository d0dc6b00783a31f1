-- disarm_many: delete many timers in one step, whoever holds them (a batch completion).
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[4] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[5] replies: agentplane:{<tenant>}:reply
-- KEYS[6] replies_old: agentplane:{<tenant>}:reply:old
-- KEYS[7] geometry: agentplane:{<tenant>}:buckets
-- KEYS[8] timer_bucket: agentplane:{<tenant>}:timer:<bucket>, then the other buckets of the timers' runs
-- ARGV[1..] timers: (bucket, run, effect) triples, each timer at most once; bucket is the index in KEYS of its run's bucket
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  if #ARGV > 3 * STEP_MAX then
    refuse("more than " .. STEP_MAX .. " timers")
  end
  -- Every row is read and checked before the first write.
  timer_geometry()
  local gone = {}
  for i = 1, #ARGV - 2, 3 do
    local at = tonumber(ARGV[i])
    local key = at and at >= 8 and at == math.floor(at) and KEYS[at]
    if not key then
      refuse("no bucket key at " .. ARGV[i])
    end
    local tid = enc_pair(ARGV[i + 1], ARGV[i + 2])
    local attrs = redis.call("HGET", key, tid)
    if attrs then
      gone[#gone + 1] = { tid = tid, m = timer_member(tid, attrs), bucket = key }
    end
  end
  timers_delete(timers_checked(gone))
  return words("OK", #gone)
end)
