-- acknowledge: forget the remembered replies in the lanes of a closing store.
--
-- KEYS[1] replies: agentplane:{<tenant>}:reply
-- KEYS[2] replies_old: agentplane:{<tenant>}:reply:old
-- ARGV[1..] lanes: the store's lanes whose replies it has received, at most 256
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK"}
-- Errors: REFUSED

--@include _lib/codec.lua
--@include _lib/core.lua

-- Sent with the lane "": nothing is remembered.
return guard(function()
  if #ARGV > STEP_MAX then
    refuse("more than " .. STEP_MAX .. " lanes")
  end
  local lanes = {}
  for _, lane in ipairs(ARGV) do
    if lane ~= "" then -- the field "" counts a generation's bytes: no lane's
      lanes[#lanes + 1] = lane
    end
  end
  if #lanes > 0 then
    redis.call("HDEL", K.replies, unpack(lanes))
    redis.call("HDEL", K.replies_old, unpack(lanes))
  end
  return words("OK")
end)
