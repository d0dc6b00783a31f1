-- claim_for: find and claim a buffered event for one wait, or recover its own claim.
--
-- KEYS[1] events: agentplane:{<tenant>}:event
-- KEYS[2] live: agentplane:{<tenant>}:event:live
-- KEYS[3] live_index: agentplane:{<tenant>}:event:live:index
-- KEYS[4] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[5] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[6] marks: agentplane:{<tenant>}:mark
-- KEYS[7] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[8] seals: agentplane:{<tenant>}:seal
-- KEYS[9] geometry: agentplane:{<tenant>}:buckets
-- KEYS[10] replies: agentplane:{<tenant>}:reply
-- KEYS[11] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:event:live:<start>, agentplane:{<tenant>}:wait:order:<start>),
--   the key buckets (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets
--   (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2..] subscription: run, effect, kind, step, phase, case, from_source ("" none), then (namespace, value) pairs
-- Returns: {"HIT", at, event row, has payload "1"/"0", payload JSON} | {"MISS", at} | {"NEED", geometry, bucket, ...}
-- Errors: CORRUPT, REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/events.lua
--@include _lib/waits.lua
--@include _lib/matching.lua

-- The usual claim_for of a wait holding a claim, its own-claim recovery,
-- re-stamped field by field: a subscription of one key, and the held row of
-- that one key, of its kind and of its sender when it names one. mark: the
-- wait's mark, as stored. Returns the HIT reply; nil, having written nothing,
-- for any other case, which the general claim decides.
local function recovered_usual(at, wid, mark)
  local held, args = mark_held(mark), ARGV
  if not held or #args ~= 10 then
    return nil
  end
  local raw, w = redis.call("HGET", K.events, held), #wid
  if not raw or string.sub(raw, 1, 1) ~= "H" or string.sub(raw, 22, 21 + w) ~= wid then
    return nil
  end
  local kind, from = enc(args[4]), args[8] ~= "" and enc(args[8])
  if string.sub(raw, 39 + w, 38 + w + #kind) ~= kind or (from and string.sub(held, 1, #from) ~= from) then
    return nil
  end
  -- The keys follow the minter's actor and basis and the dead reason.
  local nl = string.find(raw, "\n", 1, true)
  local p = string.find(raw, TERM, 39 + w + #kind, true)
  p = p and string.find(raw, TERM, p + 1, true)
  p = p and string.find(raw, TERM, p + 1, true)
  if not p or not nl or string.sub(raw, p + 1, nl - 1) ~= enc_pair(args[9], args[10]) then
    return nil
  end
  local head = string.sub(raw, 1, 21 + w) .. instant_key(at) .. string.sub(raw, 38 + w, nl)
  local payload = string.sub(raw, nl + 1)
  redis.call("HSET", K.events, held, head .. payload)
  park(ARGV[2], wid, nil, at, nil, nil, held) -- parked already: parked_at only
  local stamp = decimal(at)
  local row, has = held .. head, payload ~= "" and "1" or "0"
  local out = { "HIT", stamp, row, has, payload, text = hit_text(stamp, row, has) }
  if has == "1" then -- the payload, withheld from the remembered reply, is here
    WITHHELD[#WITHHELD + 1] = { out, 4 }
  end
  return out
end

return guard(function()
  local at = instant_arg(ARGV[1])
  local wid = enc_pair(ARGV[2], ARGV[3])
  local mark = redis.call("HGET", K.marks, wid)
  local usual = recovered_usual(at, wid, mark)
  if usual then
    return usual
  end
  local sub = sub_args()
  -- The wait's attributes are read only where a claim parks it anew.
  return claim_reply(sub, function()
    return wait_read(sub.wid, sub.run)
  end, at, mark)
end)
