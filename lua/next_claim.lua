-- next_claim: when claim_due can next claim a timer, by the operation's clock.
--
-- KEYS[1] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[2] timer_held: agentplane:{<tenant>}:timer:held
-- ARGV[1] now: instant ms, "" reads the server clock
-- Returns: {"OK", now, soonest fire_at of an unheld timer or "", soonest lease expiry or ""}
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua

-- The lowest score of a sorted set as decimal ms, or "" when it is empty.
local function head(key)
  local score = redis.call("ZRANGE", key, "0", "0", "WITHSCORES")[2]
  return score and decimal(tonumber(score)) or ""
end

local now = instant_arg(ARGV[1])
return { "OK", decimal(now), head(K.timer_walk), head(K.timer_held) }
