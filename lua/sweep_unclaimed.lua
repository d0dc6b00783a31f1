-- sweep_unclaimed: one bounded step retiring live rows received at or before a cutoff.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] dead: agentplane:{<tenant>}:event:dead
-- KEYS[5] geometry: agentplane:{<tenant>}:buckets
-- KEYS[6] replies: agentplane:{<tenant>}:reply
-- KEYS[7] replies_old: agentplane:{<tenant>}:reply:old
-- Then the live buckets (agentplane:{<tenant>}:event:live:<start>) and key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) the call reads or writes, as many as it names
--   (NEED asks for more)
-- ARGV[1] older_than: instant ms, inclusive cutoff
-- ARGV[2] reason: the dead-letter reason, verbatim
-- ARGV[3] batch: count, the most rows this step retires
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK", rows retired} | {"MORE", rows retired}: call again (the step retired rows, or dropped rows
--   that left the oldest bucket) | {"NEED", geometry, bucket, ...}
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
  -- Retired rows leave the live order, so every step starts from the oldest
  -- bucket, which holds the oldest rows; one bucket a step.
  local start = redis.call("ZRANGEBYLEX", K.live_index, "-", "[" .. instant_key(older_than), "LIMIT", "0", "1")[1]
  if not start then
    return words("OK", 0)
  end
  local key = TIME.live:key(start)
  if not named(key) then
    TIME.live:need(start)
    need_checked()
  end
  -- Rows that left the bucket are passed over (and dropped from it below).
  local left, gone = TIME.live:left(start), TIME.live:gone(start)
  -- Its eids scored by received_at less its start, up to the cutoff's.
  local upto = string.format("%.0f", tonumber(instant_key(older_than)) - tonumber(start))
  local found = redis.call("ZRANGEBYSCORE", key, "-inf", upto, "LIMIT", "0", batch + left.n)
  local eids = {}
  for _, eid in ipairs(found) do
    if not gone[eid] and #eids < batch then
      eids[#eids + 1] = eid
    end
  end
  -- Rows hold their payloads: read only as many as the step's budget takes.
  local fits = rows_within(eids, SWEEP_BYTES / 2)
  for i = fits + 1, #eids do
    eids[i] = nil
  end
  local raws, rows, size = hmget_all(K.events, eids), {}, 0
  for i, eid in ipairs(eids) do
    if size >= SWEEP_BYTES then
      break
    end
    local f = raws[i] and event_parse(eid, raws[i])
    if not f or f[E_STATE] ~= "live" then
      corrupt("index", eid, "live index names a row that is not live")
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
    dead[i] = f[E_RECEIVED] .. eids[i]
  end
  if #rows > 0 then
    live_apply(acc, false)
    redis.call("HSET", K.events, unpack(written))
    zadd_all(K.dead, dead)
  elseif left.n > 0 then
    need_checked()
    TIME.live:count(start, -TIME.live:tidy(key, start))
  else
    return words("OK", 0) -- the oldest bucket holds no row at or before the cutoff
  end
  return words("MORE", #rows)
end)
