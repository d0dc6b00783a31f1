-- Error handling, the clock and call tokens, shared by every script.
--
-- A script's body runs under pcall so that corruption, detected before any
-- write, becomes the ordinary reply {"CORRUPT", what, id, detail}.
--
-- A writing script takes its store's lane (TOKEN) and the call's number on it
-- (SEQ), both bound by the loader, and remembers its reply in the lane's field
-- as text, so that a call re-sent after a lost reply answers what its first
-- execution did (that text) instead of running again. A lane carries one call
-- at a time: the store takes it for a call and gives it back once the reply
-- has arrived, so the next call's reply replaces the last one's and nothing is
-- left to acknowledge. A lane's field holds "<seq> <text>". The first
-- execution answers the same text too, one string that a client reads for
-- less than an array of many, unless the reply is of words (words, below) or
-- holds a payload. A remembered reply never holds a payload's bytes: each
-- payload in it is written as withheld ("R", and no bytes), and the client
-- reads the payload again where a re-sent call answers so, so an erasure or a
-- purge leaves no copy behind. SEQ starting with "+" marks the call's first
-- send: nothing can be remembered for it yet, so the lane is not looked up
-- (the "+" stays in the field). A client re-sends a call without the mark: its
-- lane answers the remembered text where it holds the call's number, refuses a
-- call whose lane has gone on to a later one (a stale copy of a call already
-- answered), and otherwise runs it. A call with the lane "" (acknowledge)
-- remembers nothing.
--
-- Remembered replies are bounded per tenant whatever the clients do: they go
-- into the generation K.replies, whose field "" counts the bytes written to it
-- (each reply's lane, number and text, and REPLY.ENTRY for the hash's own
-- bookkeeping); once that reaches REPLY.GENERATION_BYTES the generation
-- becomes K.replies_old, and the one before is dropped whole (UNLINK frees it
-- in the background). A tenant's replies take at most about twice
-- REPLY.GENERATION_BYTES plus its largest single reply, and a reply is
-- remembered until at least REPLY.GENERATION_BYTES of newer ones were written
-- or its lane's next call replaced it.
-- The count is written a few entries at a time: the bytes not counted yet
-- are kept in the library's Lua state (REPLY.UNCOUNTED, by generation key),
-- which lasts as long as the library is loaded on the server, and go into the
-- field once they reach REPLY.COUNT_EVERY. A restart or a reload leaves at
-- most that many bytes of a generation uncounted; two releases' libraries
-- loaded side by side keep a count each, so a generation may turn up to that
-- many bytes early; a script sent whole (functions=False), which starts each
-- call without the state, counts each entry.

local function corrupt(what, id, detail)
  error({ agentplane_corrupt = what, id = id, detail = detail or "" }, 0)
end

-- Bounds on what one call can be asked to do, whoever sends it (the store's
-- Python refuses more before any I/O, with its own, lower limits): correlation
-- keys per event or wait, and the rows or entries one step handles.
local MAX_KEYS, STEP_MAX = 1024, 256

-- Refuses the call before it writes: the reply {"REFUSED", why}.
local function refuse(why)
  error({ agentplane_refused = why }, 0)
end

-- A count argument of a step, at most STEP_MAX.
local function bounded(arg)
  local n = tonumber(arg)
  if not n or n < 0 then
    refuse("a count must be a number at least 0")
  end
  return math.min(n, STEP_MAX)
end

-- A member or id as printable ASCII: each component ends in "|", other bytes
-- outside space..tilde are written \xNN, so any client can decode the reply.
local function printable(s)
  s = string.gsub(s, "%z\1", "|")
  return (string.gsub(s, "[^ -~]", function(c)
    return string.format("\\x%02x", string.byte(c))
  end))
end

-- The reply generations' bounds, and the bytes not counted yet (above).
local REPLY = { GENERATION_BYTES = 1048576, ENTRY = 80, COUNT_EVERY = 16384, UNCOUNTED = {}, WORDS = {} }
-- What helpers keep for the length of one call (reset by guard).
local PER_CALL = {}
-- Where this call's reply holds payloads, each {t, i}: the "has payload" flag at
-- t[i] and the payload at t[i + 1] (reset by guard; filled by event_reply).
local WITHHELD = {}
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
-- (agentplane_redis/codec.py reads it back.) The heads "$<len>:" and "*<n>:" are
-- remembered for the lengths below 256, and a string is pushed apart from its
-- head, never copied; n counts what out holds.
local DOLLAR, STAR = {}, {}
-- mark ("$" or "*") and the length's text, remembered in memo for a usual length.
local function reply_head(memo, mark, len)
  local head = mark .. length_colon(len)
  if len < 256 then
    memo[len] = head
  end
  return head
end

local function dollar(len)
  return DOLLAR[len] or reply_head(DOLLAR, "$", len)
end

local function star(len)
  return STAR[len] or reply_head(STAR, "*", len)
end

-- The text of the list v, appended to out after its first n entries.
local function serialize(v, out, n)
  local len = #v
  n = n + 1
  out[n] = STAR[len] or star(len)
  for i = 1, len do
    local e = v[i]
    local kind = type(e)
    if kind == "string" then
      local l = #e
      out[n + 1], out[n + 2] = DOLLAR[l] or dollar(l), e
      n = n + 2
    elseif kind == "table" then
      n = serialize(e, out, n)
    else
      n = n + 1
      out[n] = ":" .. string.format("%.0f", e) .. ";"
    end
  end
  return n
end

-- A reply of one or two words (a status, an instant's decimal, a count: never
-- empty, no space, no line end), answered as one string of the words joined by
-- a space (its "ok" field, which guard answers), which costs a client less to
-- read than an array and the server less to send than a status table; the client
-- splits it back into the list (agentplane_redis/codec.py, reply_list). The list
-- stays in the table, so that remember keeps the reply as a list.
local function words(a, b)
  if b == nil then
    -- One word is a script's constant: its reply table, made once, carries the
    -- text remember keeps (guard never writes into a reply of words).
    local w = REPLY.WORDS[a]
    if not w then
      w = { a, ok = a, text = "*1:" .. (DOLLAR[#a] or dollar(#a)) .. a }
      REPLY.WORDS[a] = w
    end
    return w
  end
  return { a, b, ok = a .. " " .. b }
end

-- Pushes a marker onto K.wake, where workers with nothing to do block (BLPOP):
-- one of them wakes. The two newest markers are kept for workers not blocked yet.
local function wake(marker)
  redis.call("LPUSH", K.wake, marker)
  redis.call("LTRIM", K.wake, "0", "1")
end

-- Counts an entry into the generation; a full generation becomes the old one.
local function rotate(bytes)
  local key = K.replies
  local uncounted = REPLY.UNCOUNTED
  local due = uncounted[key]
  if due and due + bytes < REPLY.COUNT_EVERY then
    uncounted[key] = due + bytes
    return
  end
  uncounted[key] = 0
  if redis.call("HINCRBY", key, "", (due or 0) + bytes) >= REPLY.GENERATION_BYTES then
    redis.call("UNLINK", K.replies_old)
    redis.call("RENAME", key, K.replies_old)
  end
end

-- Remembers the reply as text in the call's lane, each payload in it withheld;
-- returns the text.
local function remember(res)
  local held, text = WITHHELD, res.text
  if text then -- the body wrote it, the payloads withheld
    redis.call("HSET", K.replies, TOKEN, SEQ .. " " .. text)
    rotate(#TOKEN + #SEQ + #text + REPLY.ENTRY)
    return text
  end
  for n = 1, #held do
    local h = held[n]
    local t, i = h[1], h[2]
    h[3], t[i], t[i + 1] = t[i + 1], "R", ""
  end
  local a, b = res[1], res[2]
  if b == nil and type(a) == "string" then -- the usual {"NEW"}, {"OK"}, ...
    text = "*1:" .. (DOLLAR[#a] or dollar(#a)) .. a
  elseif res.ok and type(b) == "string" and res[3] == nil then -- two words
    text = "*2:" .. (DOLLAR[#a] or dollar(#a)) .. a .. (DOLLAR[#b] or dollar(#b)) .. b
  else
    -- A table constructor sizes out for the usual reply, which growing it
    -- element by element would reallocate five times.
    local out = { false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false }
    text = table.concat(out, "", 1, serialize(res, out, 0))
  end
  for n = 1, #held do
    local h = held[n]
    h[1][h[2]], h[1][h[2] + 1] = "1", h[3]
  end
  redis.call("HSET", K.replies, TOKEN, SEQ .. " " .. text)
  rotate(#TOKEN + #SEQ + #text + REPLY.ENTRY)
  return text
end

-- The entry "<seq> <text>" of a lane, in either generation; nil when none.
local function remembered(lane)
  local entry = redis.call("HGET", K.replies, lane)
  if not entry then
    entry = redis.call("HGET", K.replies_old, lane)
  end
  return entry
end

-- A re-sent call's answer from its lane (nil: the call is to run): the text
-- remembered under its number, or a refusal where the lane has gone on to a
-- later call.
local function answered()
  local entry = remembered(TOKEN)
  local cut = entry and string.find(entry, " ", 1, true)
  if not cut then
    return nil
  end
  -- Its number, without a first send's "+".
  local seq = string.sub(entry, string.byte(entry) == 43 and 2 or 1, cut - 1)
  if seq == SEQ then
    -- Written again, so that WAIT / WAITAOF on this connection also covers
    -- the first execution's writes.
    redis.call("HSET", K.replies, TOKEN, entry)
    return string.sub(entry, cut + 1)
  end
  local was, asked = tonumber(seq), tonumber(SEQ)
  if was and asked and was > asked then
    return { "REFUSED", "a stale copy of a call: its lane has answered a later one" }
  end
  return nil
end

local function guard(body)
  -- Fresh tables only where the last call filled them.
  if WITHHELD[1] then
    WITHHELD = {}
  end
  if next(PER_CALL) then
    PER_CALL = {}
  end
  if TOKEN and TOKEN ~= "" and string.byte(SEQ) ~= 43 then -- not a first send ("+")
    local reply = answered()
    if reply then
      return reply
    end
  end
  local ok, res = pcall(body)
  if ok then
    if TOKEN and TOKEN ~= "" then
      local text = remember(res)
      if not res.ok and #WITHHELD == 0 then
        return text
      end
    end
    -- Words are answered as their line, a string (words); a body that wrote its
    -- reply as text only (res.text, no elements) is answered that text,
    -- remembered or not.
    return res.ok or res[1] == nil and res.text or res
  end
  if type(res) == "table" and res.agentplane_corrupt then
    return { "CORRUPT", res.agentplane_corrupt, printable(res.id), res.detail }
  end
  if type(res) == "table" and res.agentplane_refused then
    return { "REFUSED", res.agentplane_refused }
  end
  if type(res) == "table" and res.agentplane_regrown then
    return { "BUCKETS", res.agentplane_regrown }
  end
  if type(res) == "table" and res.agentplane_need then
    local out = { "NEED", res.geometry }
    for i, n in ipairs(res.agentplane_need) do
      out[i + 2] = type(n) == "number" and string.format("%d", n) or n
    end
    return out
  end
  error(res, 0)
end

-- ARGV[first ..] as (namespace, value) pairs: encoded "ns value" for members,
-- and the raw strings for rows.
-- (One pair, the usual, is built by constructors, which size their tables.)
local function key_args(first)
  local args, last = ARGV, #ARGV - 1
  if last - first >= 2 * MAX_KEYS then
    refuse("more than " .. MAX_KEYS .. " correlation keys")
  end
  if last == first then
    local ns, value = args[first], args[first + 1]
    return { enc_pair(ns, value) }, { ns, value }
  end
  local nv, raw, n = {}, {}, 0
  for i = first, last, 2 do
    local ns, value = args[i], args[i + 1]
    n = n + 1
    nv[n] = enc_pair(ns, value)
    raw[2 * n - 1], raw[2 * n] = ns, value
  end
  return nv, raw
end

-- Where the two components of an encoded wait or timer id end (each at its
-- terminator); an id of any other shape is corrupt.
local function wid_ends(wid)
  local first = string.find(wid, TERM, 1, true)
  local second = first and string.find(wid, TERM, first + 1, true)
  if not second or second ~= #wid then
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
  return unescape(string.sub(wid, 1, first - 1)), unescape(string.sub(wid, first + 1, second - 1))
end
