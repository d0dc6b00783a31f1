-- Buckets: a family's entries spread over small keys by a hash, so that each
-- stays in the server's compact listpack encoding whatever the tenant's size:
-- the timer rows (family "timer", hashes by a hash of their run) and the
-- claim-search entries of live events and election entries of waits (family
-- "key", sorted sets by a hash of their correlation key, below).
--
-- A family has BUCKET_BASE * 2^level + split buckets (linear hashing): the
-- bucket of hash h is h mod (BUCKET_BASE * 2^level), or h mod (BUCKET_BASE *
-- 2^(level + 1)) where that is below split. K.geometry holds "<level> <split>"
-- per family ("0 0" when absent). An insert into a bucket of more than SPLIT_AT
-- entries, when the family holds more than BUCKET_LOAD entries a bucket on
-- average (the first condition is a cheap gate to the second, and keeps a
-- bucket swollen by one run or key from splitting others without end), splits
-- bucket `split` into itself and its image `split + BUCKET_BASE * 2^level`,
-- one bucket at a time. The client computes a call's bucket keys from the
-- geometry it last saw. A timer script checks that geometry (GEO) and answers
-- {"BUCKETS", geometry} before writing anything when it is not the stored one;
-- a script with key buckets checks each key bucket it is to read or write by
-- name, and answers {"NEED", geometry, bucket, ...} before writing anything when
-- one is not among its keys, and the client calls again with those buckets.
-- (agentplane_redis.keys.Geometry mirrors this.)

local BUCKET_BASE, BUCKET_LOAD, SPLIT_AT, HASH_PRIME = 8, 16, 48, 4294967291

-- A string's hash: each byte b in turn makes h = (h * 131 + b) mod HASH_PRIME
-- (exact in a double: two bytes at a time keep h * 131^2 + 255 * 132 below 2^53).
local function bucket_hash(s)
  local h, n, byte = 0, #s, string.byte
  local i = 1
  while i + 7 <= n do
    local a, b, c, d, e, f, g, k = byte(s, i, i + 7)
    h = ((h * 131 + a) * 131 + b) % HASH_PRIME
    h = ((h * 131 + c) * 131 + d) % HASH_PRIME
    h = ((h * 131 + e) * 131 + f) % HASH_PRIME
    h = ((h * 131 + g) * 131 + k) % HASH_PRIME
    i = i + 8
  end
  while i <= n do
    h = (h * 131 + byte(s, i)) % HASH_PRIME
    i = i + 1
  end
  return h
end

-- A family's geometry text read and checked against GEO, the one the client
-- computed the call's bucket keys with (its argument before the token); a call
-- made with an older geometry is answered {"BUCKETS", geometry} (guard), before
-- any write.
local function geometry_checked(family)
  local text = redis.call("HGET", K.geometry, family) or "0 0"
  if text ~= GEO then
    error({ agentplane_regrown = text }, 0)
  end
  return text
end

-- A geometry's text as {level, split, span = BUCKET_BASE * 2^level}.
local function geometry_parse(family, text)
  local level, split = string.match(text, "^(%d+) (%d+)$")
  if not level then
    corrupt("geometry", family, "bad geometry")
  end
  level, split = tonumber(level), tonumber(split)
  return { level = level, split = split, span = BUCKET_BASE * 2 ^ level }
end

-- Whether key names bucket n (its name ends in ":<n>").
local function names_bucket(key, n)
  return tonumber(string.match(key, ":(%d+)$")) == n
end

-- After an insert into a bucket that now holds more than SPLIT_AT entries, with
-- `size` entries in the family's buckets (geometry text `text`): when that is
-- more than BUCKET_LOAD a bucket, splits bucket g.split (key `from`) into
-- itself and its image (key `to`), and returns the new geometry's text. A
-- timer bucket's entries are its fields, hashed by their run (a run's rows stay
-- together, so each run is hashed once); a key bucket's are its members, whose
-- first 8 hex digits are their hash. Returns nil when no split is due, or when
-- from and to are not those buckets (the caller's geometry was older: a later
-- insert splits).
local function grow(text, family, size, from, to)
  local g = geometry_parse(family, text)
  if size <= BUCKET_LOAD * (g.span + g.split) then
    return nil
  end
  if not (from and to and names_bucket(from, g.split) and names_bucket(to, g.split + g.span)) then
    return nil
  end
  local sorted, bucket = family == "key", from
  -- its members, or its rows flat (field, value, ...)
  local flat = sorted and redis.call("ZRANGE", bucket, "0", "-1") or redis.call("HGETALL", bucket)
  local wide, step, stays = 2 * g.span, sorted and 1 or 2, {}
  local moved, gone, n = {}, {}, 0
  for i = 1, #flat, step do
    local e = flat[i]
    local by = sorted and string.sub(e, 1, 8) or wid_run(e)
    local stay = stays[by]
    if stay == nil then
      local h
      if sorted then
        h = string.match(e, "^%x%x%x%x%x%x%x%x[ ~]") and tonumber(by, 16)
        if not h then
          corrupt("index", e, "bad key bucket member")
        end
      else
        h = bucket_hash(by)
      end
      stay = h % wide == g.split
      stays[by] = stay
    end
    if not stay then
      n = n + 1
      gone[n] = e
      if sorted then
        moved[2 * n - 1], moved[2 * n] = "0", e
      else
        moved[2 * n - 1], moved[2 * n] = e, flat[i + 1]
      end
    end
  end
  if n > 0 then
    -- pairs: CHUNK is even
    call_all(sorted and "ZADD" or "HSET", to, moved)
    call_all(sorted and "ZREM" or "HDEL", from, gone)
  end
  local level, split = g.level, g.split + 1
  if split == g.span then
    level, split = level + 1, 0
  end
  local text = level .. " " .. split
  redis.call("HSET", K.geometry, family, text)
  return text
end

-- Key buckets. The claim search's entries of a live row sit in the bucket of
-- each of its correlation keys, one member each:
--   <hash> <source><received_at><id>
-- and the election entries of an unparked wait of an unsealed run in the
-- bucket of each of its key rows (waits.lua, election_entry):
--   <hash>~<from_source><created_at><wid>
-- hash the 8 hex digits of bucket_hash(enc(kind) .. enc(namespace) ..
-- enc(value)), source, id and from_source components (from_source " " for
-- none), instants 16 digits: short enough for a bucket's listpack (64 bytes a
-- member) with the usual identifiers. A hash names one key or, rarely,
-- several: a search checks the row's (or the wait's) kind and keys. Entries of
-- one key sort by sender, then by time and id.

-- The stored key geometry {level, split, span, text}, read once a call (the
-- last one parsed is kept: a tenant's geometry changes once a split).
local KEY_GEOMETRY = {}
local function key_geometry()
  local g = PER_CALL.key_geometry
  if not g then
    -- The live buckets' field too, for the calls that place or take live rows
    -- (events.lua, LIVE.geometry): one read for both.
    local both = redis.call("HMGET", K.geometry, "key", "live")
    local text = both[1] or "0 0"
    PER_CALL.live_text = both[2]
    g = KEY_GEOMETRY
    if g.text ~= text then
      g = geometry_parse("key", text)
      g.text, KEY_GEOMETRY = text, g
    end
    PER_CALL.key_geometry = g
    PER_CALL.key_prefix = string.sub(K.geometry, 1, -8) .. "event:key:"
  end
  return g
end

-- Whether key is one of the call's keys after its roles.
local function named(key)
  local keys = KEYS
  for i = K.roles + 1, #keys do
    if keys[i] == key then
      return true
    end
  end
  return false
end

-- The hash text (8 hex digits) and the key bucket of a key base = enc(kind) ..
-- nv; the bucket is false, and its number noted for NEED, when the call did
-- not name it. Kept for the call under base (which, a key's components, is
-- none of PER_CALL's own fields).
local function key_bucket(base)
  local seen = PER_CALL[base] -- a key met before in this call
  if seen then
    return seen[1], seen[2]
  end
  local h, g = bucket_hash(base), key_geometry()
  local n = h % g.span
  if n < g.split then
    n = h % (2 * g.span)
  end
  local key = PER_CALL.key_prefix .. n
  if not named(key) then
    local need = PER_CALL.need or {}
    PER_CALL.need = need
    need[#need + 1] = n
    key = false
  end
  local hex = string.format("%08x", h)
  PER_CALL[base] = { hex, key }
  return hex, key
end

-- Answers {"NEED", geometry, bucket, ...} (before any write) when a key bucket
-- the call is to touch was not among its keys.
local function need_checked()
  local need = PER_CALL.need
  if need then
    if PER_CALL.live_span then
      need[#need + 1] = "J" .. PER_CALL.live_span -- the live buckets' span (events.lua)
    end
    error({ agentplane_need = need, geometry = key_geometry().text }, 0)
  end
end

-- The two key buckets the next split writes: noted for NEED unless the call
-- named them (a call that inserts live rows names them, so that it can split,
-- and learns of every split: its geometry is the one they were computed by).
local function key_split_checked()
  local g = key_geometry()
  local need = PER_CALL.need or {}
  for n = g.split, g.split + g.span, g.span do
    if not named(PER_CALL.key_prefix .. n) then
      need[#need + 1] = n
      PER_CALL.need = need
    end
  end
end

-- After an entry was added to bucket (by a call that key_split_checked):
-- splits the next key bucket when bucket has grown past SPLIT_AT and the
-- bucket to split holds more than BUCKET_LOAD entries (a sample of the
-- family's load: buckets.lua).
local function key_grow(bucket)
  if not bucket or redis.call("ZCARD", bucket) <= SPLIT_AT then
    return
  end
  local g = key_geometry()
  local from, to = PER_CALL.key_prefix .. g.split, PER_CALL.key_prefix .. (g.split + g.span)
  bucket = from -- its load, a sample of the family's
  if grow(g.text, "key", redis.call("ZCARD", bucket) * (g.span + g.split), from, to) then
    PER_CALL.key_geometry = nil
  end
end
