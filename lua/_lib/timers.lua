-- Timers: one walk entry and one bucket row each.
--
-- A timer "tid" = enc(run) . enc(effect) has attributes "attrs" = step, then
-- "f" (forward) or "c" (compensating), then its case ("" for none): "0f",
-- "12cpay". Its member is tid . attrs, the same in every sorted set below (the
-- tid is self-delimiting, so members of equal score sort by (run, effect)).
--
-- * timer_bucket, one of the tenant's bucket hashes (the client picks it from
--   a hash of the run, so that a run's timers share one): tid -> attrs. Small
--   enough to stay in the compact listpack encoding; the run's index.
-- * timer_walk: member -> fire_at (ms). Every unheld timer; claim_due walks it.
-- * timer_held: member -> lease expiry (claimed_at + lease), and
--   timer_held_fire: member -> fire_at, for the timers under a lease (out of
--   the walk: a backlog of held timers costs a sweep nothing until their
--   leases lapse; a lapsed one returns to the walk).
-- * timer_claims: tid -> "claimed_at lease claims" of the last claim and how many
--   claims the timer has had, kept until the
--   timer is disarmed.

-- The timer buckets' geometry, checked to be the one the call's bucket keys
-- were computed with (geometry_checked).
local function timer_geometry()
  return geometry_checked("timer")
end

-- The attributes of a timer from its arguments (step, phase, case).
local function timer_attrs(step, phase, case)
  return step .. (phase == "compensating" and "c" or "f") .. case
end

-- Whether s holds a timer's attributes from position init: a step of at most
-- 10 digits, then "f" or "c".
local function attrs_at(s, init)
  local digits = string.match(s, "^(%d+)[fc]", init)
  return digits ~= nil and #digits <= 10
end

-- The member of one tid read from its bucket; corrupt when the attrs are not.
local function timer_member(tid, attrs)
  if not attrs_at(attrs, 1) then
    corrupt("timer", tid, "bad timer attributes")
  end
  return tid .. attrs
end

-- Which of the members ms are unheld (in the walk): a list of booleans, the
-- others checked to be held (a member in neither is corrupt).
local function unheld_of(ms)
  local walk = redis.call("ZMSCORE", K.timer_walk, unpack(ms))
  local held = redis.call("ZMSCORE", K.timer_held, unpack(ms))
  for i, m in ipairs(ms) do
    if not walk[i] and not held[i] then
      corrupt("index", m, "a timer's row is in no walk")
    end
  end
  return walk
end

-- Marks each timer ({tid, m} each) unheld or not (t.unheld, with its fire_at in
-- t.fire when unheld), checking that it is in the walk or held: what a script
-- reads before its first write.
local function timers_checked(timers)
  if #timers == 0 then
    return timers
  end
  local ms = {}
  for i, t in ipairs(timers) do
    ms[i] = t.m
  end
  local walk = unheld_of(ms)
  for i, t in ipairs(timers) do
    t.unheld, t.fire = walk[i] and true or false, walk[i] or nil
  end
  return timers
end

-- The run's timers in its bucket, checked (timers_checked): a list of {tid, m, unheld}.
local function run_timers(run)
  timer_geometry()
  local out, flat = {}, fields_with_prefix(K.timer_bucket, enc(run))
  for i = 1, #flat, 2 do
    out[#out + 1] = { tid = flat[i], m = timer_member(flat[i], flat[i + 1]) }
  end
  return timers_checked(out)
end

-- Deletes checked timers (timers_checked; each with its bucket in t.bucket or
-- K.timer_bucket) and their entries.
local function timers_delete(timers)
  if #timers == 0 then
    return
  end
  local tids, unheld, held, by_bucket, buckets = {}, {}, {}, {}, {}
  for i, t in ipairs(timers) do
    tids[i] = t.tid
    if t.unheld then
      unheld[#unheld + 1] = t.m
    else
      held[#held + 1] = t.m
    end
    local bucket = t.bucket or K.timer_bucket
    if not by_bucket[bucket] then
      by_bucket[bucket], buckets[#buckets + 1] = {}, bucket
    end
    local list = by_bucket[bucket]
    list[#list + 1] = t.tid
  end
  for _, bucket in ipairs(buckets) do
    call_all("HDEL", bucket, by_bucket[bucket])
  end
  call_all("HDEL", K.timer_claims, tids)
  zrem_all(K.timer_walk, unheld)
  zrem_all(K.timer_held, held)
  zrem_all(K.timer_held_fire, held)
end

-- {member, fire_at} of each timer, for a reply; corrupt when one is in no set.
-- A checked timer's walk score is known already (timers_checked).
local function timers_reply(timers, out)
  for _, t in ipairs(timers) do
    local fire = t.fire
    if not fire and t.unheld == nil then
      fire = redis.call("ZSCORE", K.timer_walk, t.m)
    end
    fire = fire or redis.call("ZSCORE", K.timer_held_fire, t.m)
    if not fire then
      corrupt("index", t.tid, "a timer's row is in no walk")
    end
    out[#out + 1] = t.m
    out[#out + 1] = decimal(tonumber(fire))
  end
  return out
end

-- Puts a sealed run's held timers (checked) back in the walk, where claim_due
-- retires them.
local function expose_timers(timers)
  for _, t in ipairs(timers) do
    local fire = not t.unheld and redis.call("ZSCORE", K.timer_held_fire, t.m)
    if fire then
      redis.call("ZREM", K.timer_held, t.m)
      redis.call("ZREM", K.timer_held_fire, t.m)
      redis.call("ZADD", K.timer_walk, fire, t.m)
    end
  end
end

-- The tid a member begins with, and its run; corrupt when it is not a member.
-- One match reads both and checks the shape: two components (no raw TERM, " ",
-- inside one), then a step of at most 10 digits and "f" or "c" (attrs_at).
local function member_tid(m)
  local tid, run = string.match(m, "^(([^ ]*) [^ ]* )%d%d?%d?%d?%d?%d?%d?%d?%d?%d?[fc]")
  if not tid then
    corrupt("timer", m, "bad timer member")
  end
  return tid, unescape(run)
end
