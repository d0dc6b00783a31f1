-- Error handling and the clock, shared by every script.
--
-- A script's body runs under pcall so that corruption, detected before any
-- write, becomes the ordinary reply {"CORRUPT", what, id, detail}.

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

local function guard(body)
  local ok, res = pcall(body)
  if ok then
    return res
  end
  if type(res) == "table" and res.agentplane_corrupt then
    return { "CORRUPT", res.agentplane_corrupt, printable(res.id), res.detail }
  end
  error(res, 0)
end

-- The operation's instant: the caller's, or the server's TIME read once.
local function instant_arg(a)
  if a == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return tonumber(a)
end

-- ARGV[first ..] as (namespace, value) pairs: encoded "ns value" for members,
-- and the raw strings for rows.
local function key_args(first)
  local nv, raw = {}, {}
  for i = first, #ARGV - 1, 2 do
    nv[#nv + 1] = enc(ARGV[i]) .. enc(ARGV[i + 1])
    raw[#raw + 1] = ARGV[i]
    raw[#raw + 1] = ARGV[i + 1]
  end
  return nv, raw
end

-- (run, effect) of an encoded wait or timer id.
local function wid_parts(wid)
  local parts, pos = take(wid, 1, 2)
  if not parts or pos ~= #wid + 1 then
    corrupt("id", wid, "bad member")
  end
  return dec(parts[1]), dec(parts[2])
end
