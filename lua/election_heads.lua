-- election_heads: the waits first up for election under an event's keys, so that a delivery names their buckets.
--
-- KEYS[1] geometry: agentplane:{<tenant>}:buckets
-- Then the key bucket (agentplane:{<tenant>}:event:key:<bucket>) of each hash, in the order of the hashes
-- ARGV[1] key geometry: the key buckets' geometry the client computed their keys with
-- ARGV[2..] hash: each key's hash with the event's kind, 8 hex digits (agentplane_redis/keys.py, key_hash)
-- Returns: {"OK", wid, ...} the waits of the first WAIT.HEADS election entries under each hash, any sender first
--   | {"BUCKETS", key geometry} the key buckets' geometry, where the call's is another (nothing read)
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua

-- A read for a store that registered none of the waits under the event's keys:
-- a delivery names the wait buckets of the waits this finds, and so resumes the
-- usual winner at its first call instead of answering NEED for its bucket.
-- The client's hashes and key buckets are trusted: a wrong one only names
-- other buckets, and the delivery checks everything it reads.
local geometry = redis.call("HGET", K.geometry, "key") or "0 0"
if geometry ~= ARGV[1] then
  return { "BUCKETS", geometry }
end
local out, first = { "OK" }, K.roles - 1
for i = 2, #ARGV do
  local head, bucket = ARGV[i] .. "~", KEYS[first + i]
  local entries = redis.call("ZRANGEBYLEX", bucket, "[" .. head, "(" .. head .. "\255", "LIMIT", "0", WAIT.HEADS)
  for _, entry in ipairs(entries) do
    -- hash "~" component(from_source) instant(created_at) wid
    local sender_end = string.find(entry, TERM, #head + 1, true)
    if sender_end then
      out[#out + 1] = string.sub(entry, sender_end + INSTANT_WIDTH + 1)
    end
  end
end
return out
