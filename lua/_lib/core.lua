-- Error handling, the clock and call tokens, shared by every script.
--
-- A script's body runs under pcall so that corruption, detected before any
-- write, becomes the ordinary reply {"CORRUPT", what, id, detail}.
--
-- A writing script takes a call token (TOKEN, bound by the loader) and
-- remembers its reply under it as text, so that a call re-sent after a lost
-- reply answers what its first execution did (that text) instead of running
-- again. The first execution answers the same text too, one string that a
-- client reads for less than an array of many, unless the reply is of words
-- (words, below). ACKS names tokens whose replies the client has received
-- (gathered a few at a time): they are forgotten here. Whatever a vanished
-- client never acknowledged is forgotten once older than REPLY_HORIZON_MS of
-- server time, found by sampling.

local function corrupt(what, id, detail)
  error({ agentplane_corrupt = what, id = id, detail = detail or "" }, 0)
end

-- A member or id as printable ASCII: each component ends in "|", other bytes
-- outside space..tilde are written \xNN, so any client can decode the reply.
local function printable(s)
  s = string.gsub(s, "%z\1", "|")
  return (string.gsub(s, "[^ -~]", function(c)
    return string.format("\\x%02x", string.byte(c))
  end))
end

local REPLY_HORIZON_MS = 86400000
-- Every REPLY_SAMPLE_EVERY-th writing call samples REPLY_SAMPLE remembered
-- replies for age, at random: one every other call on average, each costing
-- about as much as a Redis command. (Calls are counted per library instance,
-- so through the library one call in eight samples; a call sent as a script
-- counts from zero, so it always samples.)
local REPLY_SAMPLE, REPLY_SAMPLE_EVERY = 4, 8
local writes = 0
-- The server's clock in ms, read at most once per script.
local server_ms
local function server_now()
  if not server_ms then
    local t = redis.call("TIME")
    server_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return server_ms
end

-- The operation's instant: the caller's, or the server's TIME.
local function instant_arg(a)
  if a == "" then
    return server_now()
  end
  return instant_of(a)
end

-- A reply as text: "*<n>:" then each element, "$<len>:<bytes>" or ":<integer>;".
-- (agentplane_redis/codec.py reads it back.) A string's head "$<len>:" is
-- remembered for the lengths below 256, and pushed apart from the string, which
-- is never copied; n counts what out holds.
local DOLLAR = {}
local function dollar(len)
  local head = DOLLAR[len]
  if not head then
    head = "$" .. length_colon(len)
    if len < 256 then
      DOLLAR[len] = head
    end
  end
  return head
end

local function serialize(v, out, n)
  local kind = type(v)
  if kind == "string" then
    out[n + 1], out[n + 2] = dollar(#v), v
    return n + 2
  elseif kind == "table" then
    n = n + 1
    out[n] = "*" .. length_colon(#v)
    for i = 1, #v do
      n = serialize(v[i], out, n)
    end
    return n
  end
  out[n + 1] = ":" .. string.format("%.0f", v) .. ";"
  return n + 1
end

-- A reply of one or two words (a status, an instant's decimal, a count: never
-- empty, no space, no line end), sent as one status line of the words joined by
-- a space, which costs a client less to read than an array; the client splits it
-- back into the list (agentplane_redis/codec.py, reply_list). The list stays in the
-- table, so that remember keeps the reply as a list.
local function words(a, b)
  if b == nil then
    return { a, ok = a }
  end
  return { a, b, ok = a .. " " .. b }
end

-- Remembers the reply, stamped with the server's instant when the call has
-- read the clock anyway; otherwise with UNSTAMPED, which the first sample to
-- find the entry replaces with its own instant (so an entry is never
-- forgotten sooner than the horizon after it was written, and a call that
-- needs no clock reads none). Forgets the acknowledged tokens, and those of
-- remembered replies, sampled at random, that are older than the horizon (an
-- entry nobody acknowledges is sampled again and again until it goes).
-- Returns the text it keeps: the stamp, then the reply.
local UNSTAMPED = "9999999999999999"
local function remember(res)
  local stamp, text = server_ms and instant_key(server_ms) or UNSTAMPED, nil
  local only = #res == 1 and res[1]
  if type(only) == "string" then -- the usual {"NEW"}, {"OK"}, ...: one concatenation
    text = stamp .. "*1:" .. dollar(#only) .. only
  else
    local out = { stamp }
    text = table.concat(out, "", 1, serialize(res, out, 1))
  end
  redis.call("HSET", K.replies, TOKEN, text)
  if ACKS ~= "" then
    local acked = {}
    for ack in string.gmatch(ACKS, "[^,]+") do
      acked[#acked + 1] = ack
    end
    redis.call("HDEL", K.replies, unpack(acked))
  end
  writes = writes + 1
  if writes % REPLY_SAMPLE_EVERY ~= 1 then
    return text
  end
  local now = server_now()
  local sample = redis.call("HRANDFIELD", K.replies, REPLY_SAMPLE, "WITHVALUES")
  local cutoff, old, stamped = now - REPLY_HORIZON_MS, {}, {}
  for i = 1, #sample - 1, 2 do
    local entry = sample[i + 1]
    local head = string.sub(entry, 1, INSTANT_WIDTH)
    if head == UNSTAMPED then
      stamped[#stamped + 1] = sample[i]
      stamped[#stamped + 1] = instant_key(now) .. string.sub(entry, INSTANT_WIDTH + 1)
    elseif tonumber(head) - 1e15 < cutoff then
      old[#old + 1] = sample[i]
    end
  end
  if #stamped > 0 then
    redis.call("HSET", K.replies, unpack(stamped))
  end
  if #old > 0 then
    redis.call("HDEL", K.replies, unpack(old))
  end
  return text
end

local function guard(body)
  if TOKEN then
    local entry = redis.call("HGET", K.replies, TOKEN)
    if entry then
      -- Written again, so that WAIT / WAITAOF on this connection also covers
      -- the first execution's writes.
      redis.call("HSET", K.replies, TOKEN, entry)
      return string.sub(entry, INSTANT_WIDTH + 1)
    end
  end
  local ok, res = pcall(body)
  if ok then
    if TOKEN then
      local text = remember(res)
      if not res.ok then
        return string.sub(text, INSTANT_WIDTH + 1)
      end
    end
    return res
  end
  if type(res) == "table" and res.agentplane_corrupt then
    return { "CORRUPT", res.agentplane_corrupt, printable(res.id), res.detail }
  end
  error(res, 0)
end

-- ARGV[first ..] as (namespace, value) pairs: encoded "ns value" for members,
-- and the raw strings for rows.
-- (One pair, the usual, is built by constructors, which size their tables.)
local function key_args(first)
  local args, last = ARGV, #ARGV - 1
  if last == first then
    local ns, value = args[first], args[first + 1]
    return { enc(ns) .. enc(value) }, { ns, value }
  end
  local nv, raw, n = {}, {}, 0
  for i = first, last, 2 do
    local ns, value = args[i], args[i + 1]
    n = n + 1
    nv[n] = enc(ns) .. enc(value)
    raw[2 * n - 1], raw[2 * n] = ns, value
  end
  return nv, raw
end

-- Where the two components of an encoded wait or timer id end (each at its
-- terminator); an id of any other shape is corrupt.
local function wid_ends(wid)
  local first = string.find(wid, TERM, 1, true)
  local second = first and string.find(wid, TERM, first + 2, true)
  if not second or second + 1 ~= #wid then
    corrupt("id", wid, "bad member")
  end
  return first, second
end

-- The run of an encoded wait or timer id, without decoding the effect.
local function wid_run(wid)
  return unescape(string.sub(wid, 1, wid_ends(wid) - 1))
end

-- (run, effect) of an encoded wait or timer id.
local function wid_parts(wid)
  local first, second = wid_ends(wid)
  return unescape(string.sub(wid, 1, first - 1)), unescape(string.sub(wid, first + 2, second - 1))
end
