-- sweep_unclaimed: one bounded step retiring live rows received at or before a cutoff.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] dead: agentplane:{<tenant>}:event:dead
-- KEYS[4] geometry: agentplane:{<tenant>}:buckets
-- KEYS[5] replies: agentplane:{<tenant>}:reply
-- KEYS[6] replies_old: agentplane:{<tenant>}:reply:old
-- Then the key buckets (agentplane:{<tenant>}:event:key:<bucket>) of the correlation keys
--   the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] older_than: instant ms, inclusive cutoff
-- ARGV[2] reason: the dead-letter reason, verbatim
-- ARGV[3] batch: count, the most rows this step retires
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", rows retired} | {"MORE", rows retired}: the step stopped at its budget; call again | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua

-- The index bytes one step rewrites, at most (past its first row): a row's index
-- entries repeat its kind and id for each key, so large rows go fewer a step.
local SWEEP_BYTES = 262144

return guard(function()
  local older_than, reason, batch = tonumber(ARGV[1]), ARGV[2], bounded(ARGV[3])
  -- Retired rows leave the live index, so every step starts from the oldest.
  local members = redis.call("ZRANGEBYLEX", K.live, "-", "(" .. instant_key(older_than + 1), "LIMIT", "0", batch)
  local eids = {}
  for i, m in ipairs(members) do
    eids[i] = eid_after(m, 0)
  end
  -- Rows hold their payloads: read only as many as the step's budget takes.
  local fits = rows_within(eids, SWEEP_BYTES / 2)
  for i = fits + 1, #eids do
    eids[i] = nil
  end
  local raws, rows, size = hmget_all(K.events, eids), {}, 0
  local status = fits < #members and "MORE" or "OK"
  for i, eid in ipairs(eids) do
    if size >= SWEEP_BYTES then
      status = "MORE"
      break
    end
    local f = raws[i] and event_parse(eid, raws[i])
    if not f or f[E_STATE] ~= "live" then
      corrupt("index", members[i], "live index names a row that is not live")
    end
    rows[i] = f
    size = size + 2 * (#raws[i] + (#f - E_KEYS) / 2 * (#f[E_KIND] + #eid))
  end
  -- live -> dead, for the whole batch in a fixed number of calls.
  local acc, written, dead = nil, {}, {}
  for i, f in ipairs(rows) do
    acc = live_collect(acc, eids[i], f)
    f[E_STATE], f[E_REASON] = "dead", reason
    written[#written + 1] = eids[i]
    written[#written + 1] = event_pack(f)
    dead[i] = members[i]
  end
  if #rows > 0 then
    live_apply(acc, false)
    redis.call("HSET", K.events, unpack(written))
    zadd_all(K.dead, dead)
  end
  return words(status, #rows)
end)
