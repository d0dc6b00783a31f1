-- disarm: delete a timer and its entries, whoever holds it.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[3] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[4] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[5] geometry: agentplane:{<tenant>}:buckets
-- KEYS[6] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[7] replies: agentplane:{<tenant>}:reply
-- KEYS[8] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] run: the timer's run
-- ARGV[2] effect: the timer's effect
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"REMOVED"} | {"NONE"}
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
    return words("NONE")
  end
  -- Held (the usual case: a timer is disarmed once its claim is handled), its
  -- member leaves both held sets; else it must be in the walk, and leaves it.
  -- In neither, it is corrupt, and nothing was written.
  local m = timer_member(tid, attrs)
  if redis.call("ZREM", K.timer_held, m) == 1 then
    redis.call("ZREM", K.timer_held_fire, m)
  elseif redis.call("ZREM", K.timer_walk, m) == 0 then
    corrupt("index", m, "a timer's row is in no walk")
  end
  redis.call("HDEL", K.timer_bucket, tid)
  redis.call("HDEL", K.timer_claims, tid)
  return words("REMOVED")
end)
