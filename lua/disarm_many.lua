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
-- ARGV[1..] timers, by bucket: the index in KEYS of a bucket, how many of the timers are in it, then each one's id
--   (enc(run) .. enc(effect)); each timer at most once
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", timers removed}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/timers.lua

return guard(function()
  timer_geometry()
  -- Every row is read and checked before the first write, a bucket at a time.
  -- An id that is not a timer's finds no row in its bucket: it is not counted.
  local groups, tids, ms, i, asked = {}, {}, {}, 1, 0
  while i <= #ARGV do
    local at, count = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    local key = at and at >= 8 and at == math.floor(at) and KEYS[at]
    if not key then
      refuse("no bucket key at " .. ARGV[i])
    end
    if not count or count < 1 or count ~= math.floor(count) or i + 1 + count > #ARGV then
      refuse("a bucket's count of timers must be at least 1 and its ids follow it")
    end
    asked = asked + count
    if asked > STEP_MAX then
      refuse("more than " .. STEP_MAX .. " timers")
    end
    local rows, found = redis.call("HMGET", key, unpack(ARGV, i + 2, i + 1 + count)), {}
    for j = 1, count do
      if rows[j] then
        local tid = ARGV[i + 1 + j]
        found[#found + 1], tids[#tids + 1], ms[#ms + 1] = tid, tid, timer_member(tid, rows[j])
      end
    end
    groups[#groups + 1] = { key = key, tids = found }
    i = i + 2 + count
  end
  if #tids == 0 then
    return words("OK", 0)
  end
  local walk, unheld, held = unheld_of(ms), {}, {}
  for j, m in ipairs(ms) do
    if walk[j] then
      unheld[#unheld + 1] = m
    else
      held[#held + 1] = m
    end
  end
  for _, g in ipairs(groups) do
    if #g.tids > 0 then
      call_all("HDEL", g.key, g.tids)
    end
  end
  call_all("HDEL", K.timer_claims, tids)
  if #unheld > 0 then
    zrem_all(K.timer_walk, unheld)
  end
  if #held > 0 then
    zrem_all(K.timer_held, held)
    zrem_all(K.timer_held_fire, held)
  end
  return words("OK", #tids)
end)
