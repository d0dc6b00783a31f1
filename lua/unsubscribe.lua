-- unsubscribe: retire one wait and shed the claim made for it, if any.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] consumed: agentplane:{<tenant>}:event:consumed
-- KEYS[3] wait_count: agentplane:{<tenant>}:wait:count
-- KEYS[4] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[5] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- KEYS[7] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[8] geometry: agentplane:{<tenant>}:buckets
-- KEYS[9] replies: agentplane:{<tenant>}:reply
-- KEYS[10] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] run: the wait's run
-- ARGV[2] effect: the wait's effect
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK"}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

-- The usual wait, retired field by field: registered with one key row, its
-- claim (if any) a row held for it, its election entry's key bucket named by
-- the call. Where the call named the order bucket holding its member, found
-- by the member's score (TIME:named_holding), the wait leaves it with no
-- geometry, index or left list read, and a bucket emptied, or left with only
-- the members on its left list, leaves the index.
-- Else it leaves the bucket holding its instant, directly where the call
-- named that, or by the bucket's left list (buckets.lua, TIME), unless that
-- is then due for tidying. m: its row, mark: its mark as stored. Reads
-- and checks everything before its first write, then writes as retire_wait and
-- shed do; answers false, having written nothing, for any other wait, which
-- the general path retires (and reports, if corrupt) from what was read.
local function retired_usual(wid, bucket, m, mark)
  local kind_end = string.find(m, TERM, 1, true)
  local step_end = kind_end and string.find(m, TERM, kind_end + 1, true)
  local case_end = step_end and string.find(m, TERM, step_end + 1, true)
  local attrs_end = case_end and string.find(m, TERM, case_end + 1, true)
  local ns_end = attrs_end and string.find(m, TERM, attrs_end + 1, true)
  local key_end = ns_end and string.find(m, TERM, ns_end + 1, true)
  local created = string.sub(m, -INSTANT_WIDTH)
  if not key_end or #m ~= key_end + INSTANT_WIDTH or string.find(created, "%D") then
    return false
  end
  local key, start = TIME.order:named_holding(created, wid) -- its bucket, if named
  local direct, listed = key ~= nil, false
  if not direct then
    start = TIME.order:holding(created)
    if not start then
      return false
    end
    local left = TIME.order:left(start)
    key = TIME.order:key(start)
    listed = not named(key)
    if listed and (left.n + 1 >= TIME.TIDY or left.n + 1 >= left.entries) then
      return false
    end
  end
  local nv, attrs = string.sub(m, attrs_end + 1, key_end), nil
  if not mark then -- unparked, it leaves the election: its entry's bucket named?
    attrs = { false, string.sub(m, 1, kind_end), string.sub(m, case_end + 1, attrs_end) }
    if not select(2, key_bucket(attrs[A_KIND] .. nv)) then
      return false
    end
  end
  -- Its held row last: the general path reads it again only where it is corrupt.
  local held, raw, nl = mark_held(mark), nil, nil
  if held then
    raw = redis.call("HGET", K.events, held)
    nl = raw and string.find(raw, "\n", 1, true)
    if not nl or string.sub(raw, 1, 1) ~= "H" or string.sub(raw, 22, 21 + #wid) ~= wid then
      return false
    end
  end
  if direct then
    redis.call("ZREM", key, wid)
    local entries = redis.call("HINCRBY", K.wait_order, start, "-1")
    if entries <= 0 then
      TIME.order:emptied(start)
    elseif entries < TIME.TIDY and redis.call("HEXISTS", K.wait_order, "g" .. start) == 1 then
      -- Where only members on its left list remain (a list holds fewer than
      -- TIME.TIDY), they go, and the bucket with them.
      local left = TIME.order:left(start)
      if left.n >= left.entries then
        TIME.order:count(start, -TIME.order:tidy(key, start))
      end
    end
  else
    TIME.order:remove_all({ { member = wid, start = start, key = not listed and key } })
  end
  mark_clear(wid)
  redis.call("HDEL", bucket, wid)
  if attrs then
    local bucket, entry = election_entry(attrs, nv, created, wid) -- (its key bucket)
    redis.call("ZREM", bucket, entry)
  end
  redis.call("INCRBY", K.wait_count, "-1")
  if raw then
    shed_stored(held, raw, nl)
  end
  return true
end

return guard(function()
  local run, effect = ARGV[1], ARGV[2]
  local wid = enc_pair(run, effect)
  local bucket, m = WAIT.found(wid)
  if not bucket then
    bucket = WAIT.named(run)
    m = redis.call("HGET", bucket, wid)
  end
  local mark = redis.call("HGET", K.marks, wid)
  if m and retired_usual(wid, bucket, m, mark) then
    return words("OK")
  end
  local attrs, rows
  if m then
    attrs, rows = wait_parse(wid, m)
  end
  local held = mark_held(mark)
  if not mark then -- unparked, it leaves the election
    election_checked(attrs, rows)
  end
  if attrs then
    rows = TIME.order.checked(wid, rows)
  end
  need_checked()
  local f = held and event_read(held)
  if held and (not f or f[E_STATE] ~= "held" or f[E_RUN] ~= run or f[E_EFFECT] ~= effect) then
    corrupt("claim", wid, "mark names a row not held for its wait")
  end
  retire_wait(wid, attrs, rows)
  -- Only this wait's claim is shed (its mark went with the wait); the run's
  -- other waits keep theirs.
  if held then
    shed(held, f)
  end
  return words("OK")
end)
