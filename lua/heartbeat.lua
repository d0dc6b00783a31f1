-- heartbeat: renew a running worker's registry entry; drop the entries of the dead.
--
-- KEYS[1] workers: agentplane:{<tenant>}:workers
-- KEYS[2] replies: agentplane:{<tenant>}:reply
-- KEYS[3] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] worker: the worker's id
-- ARGV[2] record: what it says of itself (JSON text), "" to leave the registry
-- ARGV[3] now: instant ms, "" reads the server clock
-- ARGV[4] ttl: ms, an entry not renewed for longer is dropped
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", entries dropped}
-- Errors: REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua

-- A registry holds at most this many workers: a tenant's fleet, not a leak.
local MAX_WORKERS = 4096

return guard(function()
  local now, ttl = instant_arg(ARGV[3]), tonumber(ARGV[4])
  if not ttl or ttl < 1 then
    refuse("ttl must be a positive number of ms")
  end
  if ARGV[2] == "" then
    redis.call("HDEL", K.workers, ARGV[1])
  else
    if redis.call("HLEN", K.workers) >= MAX_WORKERS and redis.call("HEXISTS", K.workers, ARGV[1]) == 0 then
      refuse("the registry holds " .. MAX_WORKERS .. " workers already")
    end
    redis.call("HSET", K.workers, ARGV[1], decimal(now) .. " " .. ARGV[2])
  end
  -- Each entry starts with the instant of its last beat.
  local flat, stale = redis.call("HGETALL", K.workers), {}
  for i = 1, #flat, 2 do
    local at = tonumber(string.match(flat[i + 1], "^(%-?%d+) "))
    if not at or at < now - ttl then
      stale[#stale + 1] = flat[i]
    end
  end
  if #stale > 0 then
    call_all("HDEL", K.workers, stale)
  end
  return words("OK", decimal(#stale))
end)
