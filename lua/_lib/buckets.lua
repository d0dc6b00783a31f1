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
  if i <= n then -- the last 1 to 7 bytes, read in one call
    local a, b, c, d, e, f, g = byte(s, i, n)
    h = (h * 131 + a) % HASH_PRIME
    if b then
      h = (h * 131 + b) % HASH_PRIME
    end
    if c then
      h = (h * 131 + c) % HASH_PRIME
    end
    if d then
      h = (h * 131 + d) % HASH_PRIME
    end
    if e then
      h = (h * 131 + e) % HASH_PRIME
    end
    if f then
      h = (h * 131 + f) % HASH_PRIME
    end
    if g then
      h = (h * 131 + g) % HASH_PRIME
    end
  end
  return h
end

-- A family's geometry text read and checked against GEO, the one the client
-- computed the call's bucket keys with (its argument before the token); a call
-- made with an older geometry is answered {"BUCKETS", geometry} (guard), before
-- any write.
local function geometry_checked(family)
  -- (A call of a run's waits and timers read the timer field with the others: key_geometry.)
  local text = family == "timer" and PER_CALL.timer_text or redis.call("HGET", K.geometry, family) or "0 0"
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
-- more than `load` a bucket (BUCKET_LOAD when nil), splits bucket g.split
-- (key `from`) into itself and its image (key `to`), and returns the new
-- geometry's text. A timer or wait bucket's entries are its fields, hashed by
-- their run (a run's rows stay together, so each run is hashed once); a key
-- bucket's are its members, whose first 8 hex digits are their hash. Returns nil when no split is due, or when
-- from and to are not those buckets (the caller's geometry was older: a later
-- insert splits).
local function grow(text, family, size, from, to, load)
  local g = geometry_parse(family, text)
  if size <= (load or BUCKET_LOAD) * (g.span + g.split) then
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

-- What the calls of one tenant reuse (the last tenant's, so a server of many
-- tenants parses again when they alternate): its keys' prefixes, and each
-- geometry and time family state parsed, with the stored text it was parsed
-- from (a text changes once a split, or once a time bucket opens).
local MEMO = {}
local function memo()
  local m = MEMO
  if m.tenant ~= K.geometry then
    local base = string.sub(K.geometry, 1, -8)
    m = { tenant = K.geometry, base = base, key = base .. "event:key:", wait = base .. "wait:", geometry = {} }
    MEMO = m
  end
  return m
end

-- The geometry of family ("key" or "wait") stored as text, parsed once (the
-- table is shared: read it, never write it).
local function geometry_of(m, family, text)
  local g = m.geometry[family]
  if not g or g.text ~= text then
    g = geometry_parse(family, text)
    g.text, g.prefix = text, m[family]
    m.geometry[family] = g
  end
  return g
end

-- The stored key geometry {level, split, span, text}, read once a call.
local function key_geometry()
  local g = PER_CALL.key_geometry
  if not g then
    -- The time buckets' fields too (TIME:state, below), and the timer
    -- buckets' where the call names one (geometry_checked): one read for all.
    local fields = K.timer_bucket and redis.call("HMGET", K.geometry, "key", "live", "order", "wait", "timer")
      or redis.call("HMGET", K.geometry, "key", "live", "order", "wait")
    local m = memo()
    PER_CALL.time_text = { live = fields[2], order = fields[3] }
    PER_CALL.wait_text = fields[4] or "0 0"
    PER_CALL.timer_text = K.timer_bucket and (fields[5] or "0 0") or nil
    g = geometry_of(m, "key", fields[1] or "0 0")
    PER_CALL.key_geometry = g
    PER_CALL.key_prefix = m.key
  end
  return g
end

-- Whether key is one of the call's keys after its roles: looked for among
-- them where they are few (up to 16, as the usual call names), or in a set of
-- them made at the first question of a call that names more (a table grown key
-- by key costs more than a few comparisons of strings Lua holds once each).
local function named(key)
  local keys = KEYS
  local first, last = K.roles + 1, #keys
  if last - first < 16 then
    for i = first, last do
      if keys[i] == key then
        return true
      end
    end
    return false
  end
  local set = PER_CALL.named
  if not set then
    set = {}
    for i = first, last do
      set[keys[i]] = true
    end
    PER_CALL.named = set
  end
  return set[key] == true
end

-- The bucket that hash h picks by the geometry g (linear hashing): its key
-- under prefix, or false when the call did not name it, its number (after
-- letter, if given) noted for NEED.
local function bucket_named(prefix, g, h, letter)
  local n = h % g.span
  if n < g.split then
    n = h % (2 * g.span)
  end
  local key = prefix .. n
  if named(key) then
    return key
  end
  local need = PER_CALL.need or {}
  PER_CALL.need = need
  need[#need + 1] = letter and letter .. n or n
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
  local h, g = bucket_hash(base), key_geometry() -- (which sets the prefix)
  local key = bucket_named(PER_CALL.key_prefix, g, h)
  local hex = string.format("%08x", h)
  PER_CALL[base] = { hex, key }
  return hex, key
end

-- Answers {"NEED", geometry, bucket, ...} (before any write) when a key bucket
-- the call is to touch was not among its keys.
local function need_checked()
  local need = PER_CALL.need
  if need then
    for _, family in ipairs(PER_CALL.spans or {}) do
      need[#need + 1] = family:span_item() -- a time bucket family's span (below)
    end
    if PER_CALL.wait_geometry then -- the wait buckets' geometry (below)
      need[#need + 1] = "V" .. PER_CALL.wait_text
    end
    error({ agentplane_need = need, geometry = key_geometry().text }, 0)
  end
end

-- The two buckets the next split of a family writes (g: its geometry, the
-- key buckets' when nil; prefix and letter: its keys' and its NEED items'):
-- noted for NEED unless the call named them (a call that inserts names them,
-- so that it can split, and learns of every split: its geometry is the one
-- they were computed by).
local function split_checked(g, prefix, letter)
  g = g or key_geometry()
  prefix = prefix or PER_CALL.key_prefix
  for n = g.split, g.split + g.span, g.span do
    if not named(prefix .. n) then
      local need = PER_CALL.need or {}
      PER_CALL.need = need
      need[#need + 1] = letter and letter .. n or n
    end
  end
end

-- After an entry was added to bucket (by a call that split_checked):
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

-- Wait buckets. A registered wait's row (waits.lua) is the field wid of the
-- wait bucket of its run, a hash: "wait:<n>", n picked from bucket_hash(run)
-- by the family "wait"'s geometry as a timer bucket is (a run's waits share
-- one bucket). A call names the wait buckets it reads or writes after its
-- roles, like key buckets; one it did not name is noted for NEED as "W<n>",
-- with the family's geometry as "V<level> <split>". The buckets split as
-- timer buckets do, at a larger load: a hash keeps its listpack up to 512
-- entries (each field and value within 64 bytes).
local WAIT = { LOAD = 64, SPLIT_AT = 160, HEADS = 8 }

-- The stored wait geometry {level, split, span, text, prefix}, read once a call.
function WAIT.geometry()
  local g = PER_CALL.wait_geometry
  if not g then
    key_geometry() -- reads the wait field too
    g = geometry_of(memo(), "wait", PER_CALL.wait_text)
    PER_CALL.wait_geometry = g
  end
  return g
end

-- The wait bucket of run, or false (its number noted for NEED) when the call
-- did not name it.
function WAIT.bucket(run)
  local known = PER_CALL.wait_buckets or {}
  PER_CALL.wait_buckets = known
  if known[run] ~= nil then
    return known[run]
  end
  local g = WAIT.geometry()
  local key = bucket_named(g.prefix, g, bucket_hash(run), "W")
  known[run] = key
  return key
end

-- A wait bucket the call named that holds wid's row, and the row; nil where
-- none does. Read without the geometry: a row found proves its bucket current,
-- since a split moves each row it moves in one step.
function WAIT.found(wid)
  local prefix, keys = memo().wait, KEYS
  for i = K.roles + 1, #keys do
    local key = keys[i]
    if string.sub(key, 1, #prefix) == prefix and string.find(key, "^%d+$", #prefix + 1) then
      local row = redis.call("HGET", key, wid)
      if row then
        return key, row
      end
    end
  end
  return nil
end

-- The wait bucket of run, answering NEED (before any write) when the call did
-- not name it.
function WAIT.named(run)
  local key = WAIT.bucket(run)
  if not key then
    need_checked()
  end
  return key
end

-- The two wait buckets the next split writes, noted for NEED unless named.
function WAIT.split_checked()
  local g = WAIT.geometry()
  split_checked(g, g.prefix, "W")
end

-- After a row was added to bucket (by a call that WAIT.split_checked): splits
-- the next wait bucket when bucket holds more than WAIT.SPLIT_AT rows and the
-- bucket to split more than WAIT.LOAD (a sample of the family's load).
function WAIT.grow(bucket)
  if redis.call("HLEN", bucket) <= WAIT.SPLIT_AT then
    return
  end
  local g = WAIT.geometry()
  local from, to = g.prefix .. g.split, g.prefix .. (g.split + g.span)
  bucket = from -- its load, a sample of the family's
  if grow(g.text, "wait", redis.call("HLEN", bucket) * (g.span + g.split), from, to, WAIT.LOAD) then
    PER_CALL.wait_geometry = nil
  end
end

-- Time buckets (docs/keys.md, "Time buckets"): an order by time, oldest first
-- (the live order, the waits' registration order), in small sorted sets of
-- members each scored by its instant less the bucket's start (ms), each
-- holding the members of instants from its start (16 digits, the bucket's
-- name) until the next bucket's start; the family's index lists the starts.
-- A bucket opens when a member arrives past the newest bucket's end, at its
-- instant rounded down to the span (2^span ms), so the store names the
-- bucket of its clock's instant and the bucket before or after it. A member
-- that leaves from a bucket the call did not name is listed in the bucket's
-- left list (the counts hash's field "g" .. start, members each ended by
-- "\n") and stays in the bucket until a call that names the bucket drops the
-- list's members from it: such a call is asked for (NEED) once the list holds
-- TIME.TIDY members or every entry of the bucket. The counts hash counts each
-- bucket's entries (field start), and, for a counted family, the members
-- (field ""). The span follows the rate: while the newest bucket holds
-- TIME.FULL entries or more, it shrinks to the span that would hold TIME.FIT
-- at the rate of the bucket's last 16, and it doubles when a bucket opens
-- after one of fewer than TIME.THIN.
local TIME = { TIDY = 16, FULL = 64, FIT = 64, THIN = 48, MAX_SPAN = 40, ABSENT = "10", PAGE_BUCKETS = 4 }

-- A family's index and counts are read and written on every call that places
-- or takes a member: a sentinel longer than a listpack entry (64 bytes) keeps
-- them in the server's O(1) and O(log n) encodings from their first bucket
-- on, where a listpack of a few hundred buckets would be scanned each time.
-- The index's sorts after every start ("~"), so reads end before it ("(~").
TIME.SENTINEL = "~ kept a hash table and a skiplist: read and written by every call of the family"

-- A family: the roles of its counts hash and its index, its geometry field,
-- its buckets' key suffix, the letters of its NEED items (a bucket, the
-- span), and whether its counts hash counts its members.
-- (Its methods are TIME's, copied: a function library has no metatables.)
function TIME.family(counts, index, field, suffix, letter, span_letter, counted)
  local family = {
    counts = counts,
    index = index,
    field = field,
    suffix = suffix,
    letter = letter,
    span_letter = span_letter,
    counted = counted,
  }
  local methods = { "state", "span_item", "store", "key", "need", "holding", "place", "left" }
  methods[#methods + 1], methods[#methods + 2], methods[#methods + 3] = "slot", "tidy", "count"
  methods[#methods + 1], methods[#methods + 2], methods[#methods + 3] = "fit", "apply", "page"
  methods[#methods + 1], methods[#methods + 2] = "remove_all", "gone"
  methods[#methods + 1], methods[#methods + 2] = "named_holding", "emptied"
  for i = 1, #methods do -- (a library's load has no ipairs)
    family[methods[i]] = TIME[methods[i]]
  end
  return family
end

-- The family's state in this call: its span exponent, the newest bucket's
-- start (false for none) and its end, the instant from which a member opens
-- a new bucket (the geometry field: "<span> <newest start> <end>", or
-- "<span>" while there is no bucket; absent TIME.ABSENT), read once a call;
-- and the left lists read.
function TIME:state()
  local st = PER_CALL[self]
  if not st then
    key_geometry() -- reads the families' fields too
    local m = memo()
    local text = PER_CALL.time_text[self.field] or TIME.ABSENT
    local parsed = m[self]
    if not parsed or parsed.text ~= text then
      local j, newest, ends = string.match(text, "^(%d%d?) (%d+) (%d+)$")
      if not j then
        j = string.match(text, "^%d%d?$")
      end
      j = tonumber(j)
      if not j or j > TIME.MAX_SPAN or (newest and (#newest ~= INSTANT_WIDTH or #ends ~= INSTANT_WIDTH)) then
        corrupt("geometry", self.field, "bad span, newest bucket or end")
      end
      parsed = { text = text, span = j, newest = newest or false, ends = ends, prefix = m.base .. self.suffix }
      m[self] = parsed
    end
    st = {
      span = parsed.span,
      newest = parsed.newest,
      ends = parsed.ends,
      left = {},
      prefix = parsed.prefix,
    }
    PER_CALL[self] = st
    local spans = PER_CALL.spans or {}
    PER_CALL.spans = spans
    spans[#spans + 1] = self -- need_checked names its span
  end
  return st
end

-- Its NEED item for the span.
function TIME:span_item()
  return self.span_letter .. self:state().span
end

-- Stores the span exponent j, the newest start and its end (16 digits each).
function TIME:store(j, newest, ends)
  local st = self:state()
  st.span, st.newest, st.ends = j, newest, ends
  redis.call("HSET", K.geometry, self.field, newest and (j .. " " .. newest .. " " .. ends) or (j .. ""))
end

function TIME:key(start)
  return self:state().prefix .. start
end

-- Notes the bucket at start for NEED.
function TIME:need(start)
  local need = PER_CALL.need or {}
  PER_CALL.need = need
  need[#need + 1] = self.letter .. start
end

-- The start of the bucket holding members of instant r (16 digits), or nil.
function TIME:holding(r)
  local st = self:state()
  local newest = st.newest
  if newest and tonumber(newest) <= tonumber(r) then
    return newest
  end
  -- (The key rows of one wait share their instant: one read for them all.)
  local held = st.held or {}
  st.held = held
  if held[r] == nil then
    held[r] = redis.call("ZREVRANGEBYLEX", K[self.index], "[" .. r, "-", "LIMIT", "0", "1")[1] or false
  end
  return held[r] or nil
end

-- Where a member of instant r joins: the bucket's start, and whether it
-- opens. Past the newest bucket's end, a bucket opens at r rounded down to
-- the span, which the store can name beforehand; before every bucket, one
-- opens the same way. A bucket not named is noted for NEED.
function TIME:place(r)
  local st = self:state()
  local rn, newest = tonumber(r), st.newest
  local start, open = nil, false
  if newest and rn >= tonumber(newest) then
    local ends = tonumber(st.ends)
    if rn < ends then
      start = newest
    else
      local span = 2 ^ st.span
      start, open = string.format("%016.0f", math.max(rn - rn % span, ends)), true
    end
  else
    start = newest and redis.call("ZREVRANGEBYLEX", K[self.index], "[" .. r, "-", "LIMIT", "0", "1")[1]
    if not start then -- before every bucket: from r rounded down, to the oldest
      local span = 2 ^ st.span
      start, open = string.format("%016.0f", rn - rn % span), true
    end
  end
  if not named(self:key(start)) then
    self:need(start)
  end
  return start, open
end

-- The left list of the bucket at start as this call keeps it: {entries, list, n}.
function TIME:left(start)
  local all = self:state().left
  local b = all[start]
  if not b then
    local read = redis.call("HMGET", K[self.counts], start, "g" .. start)
    local list, n, pos = read[2] or "", 0, 1
    while true do -- its members, counted by plain finds (a pattern steps through every byte)
      local e = string.find(list, "\n", pos, true)
      if not e then
        break
      end
      n, pos = n + 1, e + 1
    end
    b = { entries = tonumber(read[1] or "0"), list = list, n = n }
    all[start] = b
  end
  return b
end

-- The slot of a member of instant r: {key (false: not named), start,
-- member, score, open} for one that joins (add), or one that leaves.
function TIME:slot(r, member, add)
  local slot = { member = member }
  if add then
    slot.start, slot.open = self:place(r)
  else
    slot.start = self:holding(r)
    if not slot.start then
      corrupt("index", r .. member, "no bucket of " .. self.field .. " holds it")
    end
  end
  slot.score = string.format("%.0f", tonumber(r) - tonumber(slot.start))
  local key = self:key(slot.start)
  if named(key) then
    slot.key = key
  elseif not add then
    -- It leaves by the left list: due for dropping at TIME.TIDY, or at every entry.
    local b = self:left(slot.start)
    b.pending = (b.pending or 0) + 1
    if b.n + b.pending >= TIME.TIDY or b.n + b.pending >= b.entries then
      self:need(slot.start)
    end
  end
  return slot
end

-- The members on the left list of the bucket at start, as a set.
function TIME:gone(start)
  local set = {}
  for m in string.gmatch(self:left(start).list, "([^\n]*)\n") do
    set[m] = true
  end
  return set
end

-- Where the left list b holds member m (its position), or nil.
function TIME.listed(b, m)
  return string.find("\n" .. b.list, "\n" .. m .. "\n", 1, true)
end

-- Drops the left list's members from the named bucket at start; returns how many.
function TIME:tidy(key, start)
  local b = self:left(start)
  if b.n == 0 then
    return 0
  end
  local gone, i = {}, 0
  for m in string.gmatch(b.list, "([^\n]*)\n") do
    i = i + 1
    gone[i] = m
  end
  zrem_all(key, gone)
  redis.call("HDEL", K[self.counts], "g" .. start)
  b.list, b.n, b.entries = "", 0, b.entries - i
  return i
end

-- Counts n entries more (or fewer) in the bucket at start; a bucket of none
-- leaves the index.
function TIME:count(start, n)
  local st = self:state()
  local entries = redis.call("HINCRBY", K[self.counts], start, n)
  if st.left[start] then
    st.left[start].entries = entries
  end
  if entries <= 0 then
    self:emptied(start)
  end
  return entries
end

-- The bucket at start, counted empty, leaves the counts and the index.
function TIME:emptied(start)
  local st = self:state()
  redis.call("HDEL", K[self.counts], start)
  redis.call("ZREM", K[self.index], start)
  if st.newest == start then
    -- The bucket before holds members of instants before this one's start.
    local before = redis.call("ZREVRANGEBYLEX", K[self.index], "(~", "-", "LIMIT", "0", "1")[1]
    self:store(st.span, before or false, start)
  end
end

-- The bucket the call named (after its roles) that holds member scored by
-- instant r (16 digits), and its start; nil where none does. Read without the
-- geometry, the index or a left list: only the bucket holding instant r holds
-- a member scored by r (one left on a left list by an entry of another
-- instant is scored by that one; one that comes back at r leaves the list:
-- TIME:apply).
function TIME:named_holding(r, member)
  local prefix, keys, rn = memo().base .. self.suffix, KEYS, tonumber(r)
  for i = K.roles + 1, #keys do
    local key = keys[i]
    if string.sub(key, 1, #prefix) == prefix then
      local start = string.sub(key, #prefix + 1)
      local sn = #start == INSTANT_WIDTH and not string.find(start, "%D") and tonumber(start)
      if sn and sn <= rn then
        local score = redis.call("ZSCORE", key, member)
        if score and tonumber(score) == rn - sn then
          return key, start
        end
      end
    end
  end
  return nil
end

-- The span that would hold TIME.FIT members at the rate of the newest
-- bucket's last 16 (bucket, at start), taken when shorter: the bucket then
-- ends at the next start of that span after its last member, so that the
-- members to come open buckets of that span.
function TIME:fit(bucket, start, score)
  local st = self:state()
  local first = redis.call("ZRANGE", bucket, -16, -16, "WITHSCORES")[2]
  local elapsed = tonumber(score) - tonumber(first) + 1
  local fit = math.floor(math.log(elapsed * TIME.FIT / 16) / math.log(2))
  if fit < st.span then
    fit = math.max(fit, 0)
    local last = tonumber(start) + tonumber(redis.call("ZRANGE", bucket, -1, -1, "WITHSCORES")[2])
    local ends = math.min(last - last % 2 ^ fit + 2 ^ fit, tonumber(st.ends))
    self:store(fit, start, string.format("%016.0f", ends))
  end
end

-- Removes slots (after need_checked), a few commands a bucket: the key rows
-- of a wait of many keys leave their bucket together.
function TIME:remove_all(slots)
  local counts = K[self.counts]
  -- The members that leave the bucket at start (key false: not named).
  local function leave(start, key, members)
    if key then
      local gone = self:tidy(key, start)
      zrem_all(key, members)
      self:count(start, -(gone + #members))
    else
      local b = self:left(start)
      b.list, b.n = b.list .. table.concat(members, "\n") .. "\n", b.n + #members
      redis.call("HSET", counts, "g" .. start, b.list)
    end
  end
  if #slots == 1 then -- the usual: one member
    local slot = slots[1]
    leave(slot.start, slot.key, { slot.member })
  else
    local by, starts = {}, {}
    for _, slot in ipairs(slots) do
      local group = by[slot.start]
      if not group then
        group = { key = slot.key, members = {} }
        by[slot.start], starts[#starts + 1] = group, slot.start
      end
      group.members[#group.members + 1] = slot.member
    end
    for _, start in ipairs(starts) do
      leave(start, by[start].key, by[start].members)
    end
  end
  if self.counted and #slots > 0 then
    redis.call("HINCRBY", counts, "", -#slots)
  end
end

-- Adds or removes a slot (after need_checked).
function TIME:apply(slot, add)
  if not add then
    self:remove_all({ slot })
    return
  end
  local start, bucket, counts, st = slot.start, slot.key, K[self.counts], self:state()
  if slot.open then
    local before, j = st.newest, st.span
    redis.call("ZADD", K[self.index], "0", start)
    if not before then -- the family's first bucket (again)
      redis.call("ZADD", K[self.index], "0", TIME.SENTINEL)
      redis.call("HSET", counts, "~", TIME.SENTINEL)
    end
    if not before or tonumber(before) < tonumber(start) then
      if before and j < TIME.MAX_SPAN and tonumber(redis.call("HGET", counts, before) or "0") < TIME.THIN then
        j = j + 1
      end
      -- Its end: the next start of its span, a multiple of every span after
      -- it until the next bucket opens (a span only shrinks meanwhile).
      local sn, span = tonumber(start), 2 ^ j
      self:store(j, start, string.format("%016.0f", sn - sn % span + span))
    end
  end
  if redis.call("ZADD", bucket, slot.score, slot.member) == 0 then
    -- It left and comes back (a release, a revival) before its bucket was
    -- tidied: off the left list, the entry stays.
    local b = self:left(start)
    local at = TIME.listed(b, slot.member)
    if not at then
      corrupt("index", slot.member, "a bucket of " .. self.field .. " holds it twice")
    end
    b.list = string.sub(b.list, 1, at - 1) .. string.sub(b.list, at + #slot.member + 1)
    b.n = b.n - 1
    if b.n == 0 then
      redis.call("HDEL", counts, "g" .. start)
    else
      redis.call("HSET", counts, "g" .. start, b.list)
    end
  else
    local entries = self:count(start, 1)
    if entries >= TIME.FULL and entries % 16 == 0 and start == st.newest then
      self:fit(bucket, start, slot.score)
    end
  end
  if self.counted then
    redis.call("HINCRBY", counts, "", 1)
  end
end

-- One step of a listing, at most TIME.PAGE_BUCKETS buckets: up to room
-- members, oldest first (newest: newest first), after the cursor (instant .
-- member of one of them, "" to start), passing over those that left, with
-- the instant (16 digits) of each; and, when its buckets ran out before its
-- room, the cursor to go on from. The buckets it reads and did not name are
-- answered NEED. (Members are not joined to their instants: Redis hashes
-- every byte of a string Lua makes, and a member may hold 64 KiB of keys.)
function TIME:page(room, after, newest)
  if after ~= "" and #string.match(after, "^%d*") < INSTANT_WIDTH then
    refuse("after is not a cursor a page gave")
  end
  local index = K[self.index]
  local after_at, after_m = string.sub(after, 1, INSTANT_WIDTH), string.sub(after, INSTANT_WIDTH + 1)
  local starts
  if newest then
    local from = after == "" and "(~" or "[" .. after_at
    starts = redis.call("ZREVRANGEBYLEX", index, from, "-", "LIMIT", "0", TIME.PAGE_BUCKETS)
  else
    local holding = after ~= "" and self:holding(after_at)
    starts = redis.call("ZRANGEBYLEX", index, holding and "[" .. holding or "-", "(~", "LIMIT", "0", TIME.PAGE_BUCKETS)
  end
  for _, start in ipairs(starts) do
    if not named(self:key(start)) then
      self:need(start)
    end
  end
  need_checked()
  local members, ats, seen, seen_at = {}, {}, nil, nil
  for _, start in ipairs(starts) do
    local left, bucket = self:left(start), self:key(start)
    local gone = self:gone(start)
    -- From the cursor's score on, those of its instant up to it passed over.
    local from, ties = nil, 0
    if after ~= "" then
      from = string.format("%.0f", tonumber(after_at) - tonumber(start))
      ties = redis.call("ZCOUNT", bucket, from, from)
    end
    local limit, got = room - #members + left.n + ties, nil
    if newest then
      got = redis.call("ZREVRANGEBYSCORE", bucket, from or "+inf", "-inf", "WITHSCORES", "LIMIT", "0", limit)
    else
      got = redis.call("ZRANGEBYSCORE", bucket, from or "-inf", "+inf", "WITHSCORES", "LIMIT", "0", limit)
    end
    for i = 1, #got, 2 do
      if #members == room then
        break
      end
      local m, score = got[i], got[i + 1]
      if score ~= from or (m ~= after_m and bytes_lt(m, after_m) == newest) then
        seen, seen_at = m, instant_key(tonumber(start) + tonumber(score) - 1e15)
        if not gone[m] then
          members[#members + 1], ats[#ats + 1] = m, seen_at
        end
      end
    end
    if #members == room then
      break
    end
  end
  if #members < room and #starts == TIME.PAGE_BUCKETS and seen then
    return members, ats, seen_at .. seen
  end
  return members, ats, nil
end
