-- purge: one bounded step removing dead and consumed rows received at or before a cutoff.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] dead: agentplane:{<tenant>}:event:dead
-- KEYS[3] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[4] replies: agentplane:{<tenant>}:reply
-- KEYS[5] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1] older_than: instant ms, inclusive cutoff
-- ARGV[2] batch: count, the most rows this step removes
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK" | "MORE", rows removed}; MORE: the step stopped at PURGE_BYTES
--   of rows (they hold their payloads) before the batch, and more may be due
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

-- Rows one step reads and removes, in bytes, at most (past its first row): a
-- step of dead rows with the largest payloads stays within the contract's time.
local PURGE_BYTES = 1048576

return guard(function()
  local older_than, batch = tonumber(ARGV[1]), bounded(ARGV[2])
  local bound = "(" .. instant_key(older_than + 1)
  local dead = redis.call("ZRANGEBYLEX", K.dead, "-", bound, "LIMIT", "0", batch)
  local consumed = redis.call("ZRANGEBYLEX", K.consumed, "-", bound, "LIMIT", "0", batch)
  -- Oldest first across both: merge the two ordered runs by bytes.
  local chosen, states, eids, i, j = { dead = {}, consumed = {} }, {}, {}, 1, 1
  local size = 0
  while #eids < batch and size < PURGE_BYTES and (dead[i] or consumed[j]) do
    local state, member
    if consumed[j] == nil or (dead[i] ~= nil and bytes_lt(dead[i], consumed[j])) then
      state, member, i = "dead", dead[i], i + 1
    else
      state, member, j = "consumed", consumed[j], j + 1
    end
    local list = chosen[state]
    list[#list + 1] = member
    eids[#eids + 1] = eid_after(member, 0)
    states[#eids] = state
    size = size + redis.call("HSTRLEN", K.events, eids[#eids])
  end
  -- Rows are removed whole (keys, marks and minter live in the row), so only
  -- their state is checked.
  for n, raw in ipairs(hmget_all(K.events, eids)) do
    if not raw or row_state(raw) ~= states[n] then
      corrupt("event", eids[n], "retention index names a row in another state")
    end
  end
  if #eids > 0 then
    zrem_all(K.dead, chosen.dead)
    zrem_all(K.consumed, chosen.consumed)
    redis.call("HDEL", K.events, unpack(eids))
  end
  return words(size >= PURGE_BYTES and #eids < batch and "MORE" or "OK", #eids)
end)
