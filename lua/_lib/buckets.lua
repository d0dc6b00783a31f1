-- Buckets: a family's entries (the timer rows, family "timer") spread over
-- small hashes by a hash of their run, so that each stays in the server's
-- compact listpack encoding whatever the tenant's size.
--
-- A family has BUCKET_BASE * 2^level + split buckets (linear hashing): the
-- bucket of hash h is h mod (BUCKET_BASE * 2^level), or h mod (BUCKET_BASE *
-- 2^(level + 1)) where that is below split. K.geometry holds "<level> <split>"
-- per family ("0 0" when absent). An insert into a bucket of more than SPLIT_AT
-- rows, when the family holds more than BUCKET_LOAD entries a bucket on
-- average (the first condition is a cheap gate to the second, and keeps a
-- bucket swollen by one run from splitting others without end), splits bucket
-- `split` into itself and its image
-- `split + BUCKET_BASE * 2^level`, one bucket at a time. The client computes a
-- call's bucket keys from the geometry it last saw and passes that geometry
-- (GEO); a script whose GEO is not the current geometry answers
-- {"BUCKETS", geometry} before writing anything, and the client calls again.
-- (agentplane_redis.keys.Geometry mirrors this.)

local BUCKET_BASE, BUCKET_LOAD, SPLIT_AT, HASH_PRIME = 8, 16, 48, 4294967291

-- A string's hash: each byte b in turn makes h = (h * 131 + b) mod HASH_PRIME
-- (exact in a double: h * 131 + 255 stays below 2^40).
local function bucket_hash(s)
  local h, n = 0, #s
  for first = 1, n, 256 do
    local bytes = { string.byte(s, first, math.min(n, first + 255)) }
    for i = 1, #bytes do
      h = (h * 131 + bytes[i]) % HASH_PRIME
    end
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

-- A bucket's rows, flat (field, value, ...).
local function bucket_rows(key)
  return redis.call("HGETALL", key)
end

-- After an insert into a bucket that now holds more than SPLIT_AT rows, with
-- `size` entries in the family's buckets (geometry text `text`):
-- when that is more than BUCKET_LOAD a bucket, splits bucket g.split (key `from`) into
-- itself and its image (key `to`), run_of(field) naming each field's run (a
-- run's rows stay together, so each run is hashed once), and returns the new
-- geometry's text. Returns nil when no split is due, or when from and to are
-- not those buckets (the caller's geometry was older: a later insert splits).
local function grow(text, family, size, from, to, run_of)
  local g = geometry_parse(family, text)
  if size <= BUCKET_LOAD * (g.span + g.split) then
    return nil
  end
  if not (from and to and names_bucket(from, g.split) and names_bucket(to, g.split + g.span)) then
    return nil
  end
  local flat, wide, stays = bucket_rows(from), 2 * g.span, {}
  local moved, gone, n = {}, {}, 0
  for i = 1, #flat, 2 do
    local run = run_of(flat[i])
    local stay = stays[run]
    if stay == nil then
      stay = bucket_hash(run) % wide == g.split
      stays[run] = stay
    end
    if not stay then
      n = n + 1
      moved[2 * n - 1], moved[2 * n], gone[n] = flat[i], flat[i + 1], flat[i]
    end
  end
  call_all("HSET", to, moved) -- field, value pairs: CHUNK is even
  call_all("HDEL", from, gone)
  local level, split = g.level, g.split + 1
  if split == g.span then
    level, split = level + 1, 0
  end
  local text = level .. " " .. split
  redis.call("HSET", K.geometry, family, text)
  return text
end
