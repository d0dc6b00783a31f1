-- pending: the soonest timers, due and held included (Python merges the two lists).
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- ARGV[1] limit: count, at most this many timers from each list
-- ARGV[2] after: the fire_at (ms) of the last timer a previous page listed, "" to start
-- ARGV[3] after_member: that timer's member
-- Returns: {"OK", {member, fire_at, ...} unheld, {member, fire_at, ...} held}
-- Errors: none

--@include _lib/codec.lua

-- Timers of one list with the same fire_at as the cursor's, read to find those
-- after it, at most: a page after a timer that has gone may skip ties beyond them.
local TIES = 1024

-- The first n of a list (member, fire_at, ...), after the cursor (fire, member)
-- when fire is not "": after the member itself where the list holds it, else
-- after its place among the ties of its fire_at. Scores go back as the decimal ms
-- every other timer reply carries.
local function listed(key, n, fire, member)
  local flat
  local rank = fire ~= "" and redis.call("ZRANK", key, member)
  if fire == "" then
    flat = redis.call("ZRANGE", key, "0", n - 1, "WITHSCORES")
  elseif rank then
    flat = redis.call("ZRANGE", key, rank + 1, rank + n, "WITHSCORES")
  else
    flat = {}
    for _, m in ipairs(redis.call("ZRANGEBYSCORE", key, fire, fire, "LIMIT", "0", TIES)) do
      if #flat < 2 * n and bytes_lt(member, m) then
        flat[#flat + 1], flat[#flat + 2] = m, fire
      end
    end
    if #flat < 2 * n then
      local rest = redis.call("ZRANGEBYSCORE", key, "(" .. fire, "+inf", "WITHSCORES", "LIMIT", "0", n - #flat / 2)
      for _, v in ipairs(rest) do
        flat[#flat + 1] = v
      end
    end
  end
  for i = 2, #flat, 2 do
    flat[i] = decimal(tonumber(flat[i]))
  end
  return flat
end

local n, fire, member = tonumber(ARGV[1]), ARGV[2] or "", ARGV[3] or ""
if fire ~= "" and not string.find(fire, "^%-?%d+$") then
  return { "OK", {}, {} }
end
return { "OK", listed(K.timer_walk, n, fire, member), listed(K.timer_held_fire, n, fire, member) }
