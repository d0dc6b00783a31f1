-- Encodings shared by every script; agentplane_redis/keys.py mirrors them.
--
-- A component is a string's bytes, each byte 0x00..0x21 (controls, space and
-- "!") written "!" and the byte plus 0x40 ("!@" .. "!a"), then the
-- terminator " ": "order" -> "order ", ("stripe", "evt_1") -> "stripe evt_1 ".
-- Concatenated components compare as tuples, by bytes, a proper prefix first
-- (the terminator sorts below every byte a component holds), and read as text.
-- An instant in a member is ms + 10^15 as 16 digits, so byte order is time order.
-- Lua never compares strings with "<": that uses the server's locale (strcoll),
-- not bytes. Order comes from sorted sets, or from bytes_lt below.

local TERM = " "
-- A string none of whose bytes is escaped: every byte in 0x22..0xFF. Anchored,
-- one pass reads it; a search for an escaped byte instead tries the class
-- afresh at every position, three times the work.
local CLEAN = "^[\34-\255]*$"
local INSTANT_WIDTH = 16
local MIN_INSTANT = -62135596800000 -- 0001-01-01T00:00:00Z
local MAX_INSTANT = 253402300799999 -- 9999-12-31T23:59:59.999Z

local function escape_byte(c)
  return "!" .. string.char(string.byte(c) + 64)
end

local function unescape_byte(c)
  return string.char(string.byte(c) - 64)
end

local function enc(s)
  if string.find(s, CLEAN) then
    return s .. TERM
  end
  return (string.gsub(s, "[%z\1-\33]", escape_byte)) .. TERM
end

-- enc(a) .. enc(b), the usual pair (run and effect, source and id, namespace and
-- value). The last pair is remembered with its text, which a call often needs
-- again (a correlation key its arguments and a row both hold).
local PAIR_A, PAIR_B, PAIR_TEXT
local function enc_pair(a, b)
  if a ~= PAIR_A or b ~= PAIR_B then
    -- Both clean (CLEAN) in one pass over the pair as it is written.
    local text = a .. TERM .. b .. TERM
    if not string.find(text, "^[\34-\255]* [\34-\255]* $") then
      text = enc(a) .. enc(b)
    end
    PAIR_A, PAIR_B, PAIR_TEXT = a, b, text
  end
  return PAIR_TEXT
end

-- The string a component's body (its bytes before the terminator) stands for.
local function unescape(body)
  if not string.find(body, "!", 1, true) then
    return body
  end
  return (string.gsub(body, "!(.)", unescape_byte))
end

-- The string one encoded component (terminator included) stands for.
local function dec(c)
  return unescape(string.sub(c, 1, -2))
end

-- The n encoded components of s starting at pos, and the position after them;
-- nil when s holds fewer.
local function take(s, pos, n)
  local parts = {}
  for i = 1, n do
    local e = string.find(s, TERM, pos, true)
    if not e then
      return nil, pos
    end
    parts[i] = string.sub(s, pos, e)
    pos = e + 1
  end
  return parts, pos
end

-- Formatting a number goes through sprintf, which costs about as much as a
-- Redis command, and a step formats the same instant again and again (its
-- members, its reply): the last number each of these two formatted is
-- remembered with its text.
local KEY_MS, KEY_TEXT
local function instant_key(ms)
  if ms ~= KEY_MS then
    KEY_MS, KEY_TEXT = ms, string.format("%016.0f", ms + 1e15)
  end
  return KEY_TEXT
end

-- Instants and counters cross the boundary as decimal strings, never tostring
-- (Lua 5.1 keeps 14 significant digits).
local DECIMAL_N, DECIMAL_TEXT
local function decimal(n)
  if n ~= DECIMAL_N or n == 0 then -- 0 and -0 are equal, and print apart
    DECIMAL_N, DECIMAL_TEXT = n, string.format("%.0f", n)
  end
  return DECIMAL_TEXT
end

-- The number a decimal text stands for, as tonumber reads it. Where the text
-- is written as the store sends an instant (no sign, no leading zero, at most
-- 15 digits: what decimal prints for it), both memos above are set from the
-- text, so printing that instant again costs a concatenation, not a printf.
local ZEROS = {
  [0] = "",
  "0", "00", "000", "0000", "00000", "000000", "0000000", "00000000", "000000000",
  "0000000000", "00000000000", "000000000000", "0000000000000", "00000000000000", "000000000000000",
}
-- The member digits of an instant's text where the text is written as decimal
-- writes it (no sign, no leading zero, at most 15 digits): "1", zeros, the
-- text; nil otherwise.
local function decimal_key(s)
  if #s <= 15 and string.find(s, "^[1-9]%d*$") then
    return "1" .. ZEROS[15 - #s] .. s
  end
  return nil
end

local function instant_of(s)
  local n = tonumber(s)
  local key = n and decimal_key(s)
  if key then
    DECIMAL_N, DECIMAL_TEXT = n, s
    KEY_MS, KEY_TEXT = n, key
  end
  return n
end

local function is_step(s)
  return s ~= nil and string.find(s, "^%d+$") ~= nil and (#s <= 9 or #s == 10 and tonumber(s) <= 4294967295)
end

-- "<n>:" for a length n. Converting a number to text goes through sprintf,
-- which costs as much as a Redis command, so the usual lengths are remembered
-- (for the library's lifetime; a script sent whole starts with none).
local LENGTH = {}

local function length_colon(n)
  local s = LENGTH[n]
  if not s then
    s = string.format("%d:", n)
    if n < 256 then
      LENGTH[n] = s
    end
  end
  return s
end

-- Byte order of two strings, without the locale: true when a sorts before b.
local function bytes_lt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The members of a lex sorted set that start with prefix, at most limit of them
-- (a component never starts with byte 255, nor does an instant's digit).
local function with_prefix(key, prefix, limit)
  if limit then
    return redis.call("ZRANGEBYLEX", key, "[" .. prefix, "(" .. prefix .. "\255", "LIMIT", "0", limit)
  end
  return redis.call("ZRANGEBYLEX", key, "[" .. prefix, "(" .. prefix .. "\255")
end

-- The fields of the hash key that start with prefix, each once, and their
-- values, as a flat list: the server picks them (HSCAN ... MATCH), so the
-- hash's other fields cost no Lua. A hash is read whole in one page up to 1,024
-- fields, and in pages beyond (which may repeat a field).
local function fields_with_prefix(key, prefix)
  local glob = string.gsub(prefix, "[%*%?%[%]\\]", "\\%0") .. "*"
  local out, seen, n, cursor = {}, {}, 0, "0"
  repeat
    local page = redis.call("HSCAN", key, cursor, "MATCH", glob, "COUNT", "1024")
    local flat = page[2]
    for i = 1, #flat, 2 do
      local field = flat[i]
      if not seen[field] and string.sub(field, 1, #prefix) == prefix then
        seen[field] = true
        out[n + 1], out[n + 2] = field, flat[i + 1]
        n = n + 2
      end
    end
    cursor = page[1]
  until cursor == "0"
  return out
end

-- Variadic commands for whole lists, so a step's cost is not dominated by
-- calls. Lists go in chunks: Lua 5.1 unpacks a few thousand values at most.
local CHUNK = 1000

local function zadd_all(key, members)
  local n = #members
  if n <= 1 then -- the usual one, without a table of arguments
    if n == 1 then
      redis.call("ZADD", key, "0", members[1])
    end
    return
  end
  local args = {}
  for i, m in ipairs(members) do
    args[2 * i - 1], args[2 * i] = "0", m
  end
  for first = 1, #args, 2 * CHUNK do
    redis.call("ZADD", key, unpack(args, first, math.min(first + 2 * CHUNK - 1, #args)))
  end
end

-- One command of a key and many members (ZREM, HDEL), in chunks.
local function call_all(command, key, members)
  local n = #members
  if n == 1 then
    redis.call(command, key, members[1])
    return
  end
  for first = 1, n, CHUNK do
    redis.call(command, key, unpack(members, first, math.min(first + CHUNK - 1, n)))
  end
end

local function zrem_all(key, members)
  call_all("ZREM", key, members)
end

-- The values of many hash fields (false where absent), in order.
local function hmget_all(key, fields)
  local out = {}
  for first = 1, #fields, CHUNK do
    local part = redis.call("HMGET", key, unpack(fields, first, math.min(first + CHUNK - 1, #fields)))
    for i = 1, #part do
      out[first + i - 1] = part[i]
    end
  end
  return out
end
