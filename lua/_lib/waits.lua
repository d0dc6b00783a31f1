-- Waits: attributes, key rows, the election indexes and parked marks.
--
-- A wait (run, effect) is "wid" = enc(run) . enc(effect). Its attributes row
-- (tag "w1", kind, step, phase, case, from_source; "" for none) exists exactly
-- while it has key rows. A key row is "wid . ns value . created_at" in
-- wait_keys and "created_at . wid . ns value" in wait_order. A key row is in an
-- election index (electable, or electable_by_sender when from_source is set)
-- exactly while its wait is unparked and its run unsealed, so elections never
-- pass over anything. A mark is marks[wid] = parked_at plus one mark_index
-- member: "L" . wid (registered, run unsealed: listed by parked_waits),
-- "B" . wid (bare) or "S" . wid (run sealed: retired by parked_waits).

local W_KIND, W_STEP, W_PHASE, W_CASE, W_FROM = 2, 3, 4, 5, 6

-- A stored attributes row's fields, checked (corruption aborts the script):
-- the whole check, which wait_read falls back to.
local function wait_parse_checked(wid, raw)
  local f = unpack_row(raw)
  if not f or #f ~= 6 or f[1] ~= "w1" or f[W_KIND] == "" or not is_step(f[W_STEP]) or not is_phase(f[W_PHASE]) then
    corrupt("wait", wid, "bad attributes")
  end
  return f
end

-- The usual attributes row (no comma in its kind or from_source) read with two
-- pattern matches, as timer_fields reads a timer row: the fields as
-- wait_parse_checked reads them, or nil when the row is not in that form.
local function wait_fields(raw)
  local L = LENGTH
  local kind, step, phase, at, n =
    usual_fields(raw, "^2:w1,(%d+:)([^,]+),(%d+:)(%d+),(%d+:)(%l+),(%d+:)()")
  if not kind then
    return nil
  end
  local fl, from = string.match(raw, "^,(%d+:)([^,]*),$", at + n)
  if not fl or (L[#from] or length_colon(#from)) ~= fl or (#step > 9 and not is_step(step))
    or (phase ~= "forward" and phase ~= "compensating") then
    return nil
  end
  return { "w1", kind, step, phase, string.sub(raw, at, at + n - 1), from }
end

-- An attributes row's text: pack's, as one concatenation.
local function wait_pack(f)
  local L, a, b, c, d, e, g = LENGTH, f[1], f[2], f[3], f[4], f[5], f[6]
  return (L[#a] or length_colon(#a)) .. a .. "," .. (L[#b] or length_colon(#b)) .. b .. ","
    .. (L[#c] or length_colon(#c)) .. c .. "," .. (L[#d] or length_colon(#d)) .. d .. ","
    .. (L[#e] or length_colon(#e)) .. e .. "," .. (L[#g] or length_colon(#g)) .. g .. ","
end

-- The wait's attributes, checked, and the row they were read from (which
-- wait_pack writes again byte for byte: both reads take only such rows); nil
-- when the wait is not registered.
local function wait_read(wid)
  local raw = redis.call("HGET", K.waits, wid)
  if not raw then
    return nil
  end
  return wait_fields(raw) or wait_parse_checked(wid, raw), raw
end

local function is_sealed(run)
  return redis.call("HEXISTS", K.seals, run) == 1
end

local function is_marked(wid)
  return redis.call("HEXISTS", K.marks, wid) == 1
end

-- The wait's key rows: a list of {nv = encoded ns value, at = instant key,
-- ns = encoded ns, value = encoded value}.
local function key_rows(wid)
  local out = {}
  for _, m in ipairs(with_prefix(K.wait_keys, wid)) do
    local parts, pos = take(m, #wid + 1, 2)
    if not parts or #m - pos + 1 ~= INSTANT_WIDTH then
      corrupt("wait key", m, "bad member")
    end
    out[#out + 1] = { nv = parts[1] .. parts[2], at = string.sub(m, pos), ns = parts[1], value = parts[2] }
  end
  return out
end

local function election_entry(attrs, nv, at, wid)
  if attrs[W_FROM] == "" then
    return K.electable, enc(attrs[W_KIND]) .. nv .. at .. wid
  end
  return K.electable_by_sender, enc(attrs[W_KIND]) .. enc(attrs[W_FROM]) .. nv .. at .. wid
end

-- Key rows of a wait that has none in the election indexes: one registered by
-- this very call with electable = false (register's `stored` false). Never
-- written to.
local UNLISTED = {}

-- Puts (add = true) or takes the wait's key rows in or out of the election
-- indexes; rows: its key_rows, when the caller has read them (UNLISTED: none
-- is in them).
local function electable_set(wid, attrs, add, rows)
  for _, row in ipairs(rows or key_rows(wid)) do
    local key, m = election_entry(attrs, row.nv, row.at, wid)
    if add then
      redis.call("ZADD", key, "0", m)
    else
      redis.call("ZREM", key, m)
    end
  end
end

-- Puts the key rows register added (ns values added, created_at = at) of an
-- unparked wait of an unsealed run up for election; its older rows are up already.
local function elect_new(wid, attrs, added, at)
  local at_key, key, members = instant_key(at), nil, {}
  for i, nv in ipairs(added) do
    key, members[i] = election_entry(attrs, nv, at_key, wid)
  end
  if key then
    zadd_all(key, members)
  end
end

-- Adds the key rows the wait lacks (created_at = at); a new wait takes attrs.
-- Returns the attributes in force, whether the wait is marked, whether its run
-- is sealed, the ns values of the rows it added, and whether the wait was
-- registered before. electable = false leaves new rows out of the election
-- indexes (the caller parks the wait next, or puts them up with elect_new): a
-- wait not registered before then has none in them (UNLISTED).
local function register(run, wid, attrs, nv_list, at, electable)
  local stored = wait_read(wid)
  local marked, sealed = is_marked(wid), is_sealed(run)
  local in_force = stored or attrs
  local at_key = instant_key(at)
  local by_wid, by_time, added = {}, {}, {}
  for _, nv in ipairs(nv_list) do
    local p = wid .. nv
    -- A wait not stored has no key rows: they exist exactly while its attributes do.
    if not stored or #with_prefix(K.wait_keys, p, 1) == 0 then
      added[#added + 1] = nv
      by_wid[#by_wid + 1] = p .. at_key
      by_time[#by_time + 1] = at_key .. p
    end
  end
  zadd_all(K.wait_keys, by_wid)
  zadd_all(K.wait_order, by_time)
  if electable and not marked and not sealed then
    elect_new(wid, in_force, added, at)
  end
  if not stored then
    redis.call("HSET", K.waits, wid, wait_pack(attrs))
    if marked and not sealed then
      redis.call("ZREM", K.mark_index, "B" .. wid)
      redis.call("ZADD", K.mark_index, "0", "L" .. wid)
    end
  end
  return in_force, marked, sealed, added, stored ~= nil
end

-- Sets the wait's mark to parked_at = at; attrs is nil for an unregistered wait
-- (a wait parked already needs none); rows: its key_rows, when the caller has
-- read them, or UNLISTED; elected: the wait came from an election index, so its
-- run is not sealed.
local function park(run, wid, attrs, at, rows, elected)
  if redis.call("HSET", K.marks, wid, decimal(at)) == 0 then
    return -- parked already: only parked_at changes
  end
  local sealed = not elected and is_sealed(run)
  local class = sealed and "S" or (attrs and "L" or "B")
  redis.call("ZADD", K.mark_index, "0", class .. wid)
  if attrs and not sealed then
    electable_set(wid, attrs, false, rows)
  end
end

-- Clears the wait's mark; whether it had one. A wait with no mark has no
-- mark_index member either.
local function mark_clear(wid)
  if redis.call("HDEL", K.marks, wid) == 0 then
    return false
  end
  redis.call("ZREM", K.mark_index, "L" .. wid, "B" .. wid, "S" .. wid)
  return true
end

-- Clears the mark of a registered wait and makes it matchable again at its
-- original registration times.
local function unpark(run, wid, attrs)
  mark_clear(wid)
  if attrs and not is_sealed(run) then
    electable_set(wid, attrs, true)
  end
end

-- Removes the wait's key rows, index entries, attributes and mark.
-- Returns 1 when the wait was registered, else 0.
local function retire_wait(wid, attrs)
  local parked = mark_clear(wid)
  if not attrs then
    return 0
  end
  for _, row in ipairs(key_rows(wid)) do
    redis.call("ZREM", K.wait_keys, wid .. row.nv .. row.at)
    redis.call("ZREM", K.wait_order, row.at .. wid .. row.nv)
    if not parked then -- a parked wait's rows are out of the election indexes
      local key, m = election_entry(attrs, row.nv, row.at, wid)
      redis.call("ZREM", key, m)
    end
  end
  redis.call("HDEL", K.waits, wid)
  return 1
end

-- A Subscription reply: {run, effect, attributes row, {ns, value, ...}}, keys
-- sorted; rows: the wait's key_rows, when the caller has read them; raw: the
-- attributes row wait_read read them from, when the caller has it.
local function sub_reply(run, effect, wid, attrs, rows, raw)
  local keys = {}
  for _, row in ipairs(rows or key_rows(wid)) do
    keys[#keys + 1] = dec(row.ns)
    keys[#keys + 1] = dec(row.value)
  end
  return { run, effect, raw or wait_pack(attrs), keys }
end

-- The distinct waits of a run, in effect order: a list of {wid, effect}.
local function run_waits(run)
  local prefix, out, last = enc(run), {}, nil
  for _, m in ipairs(with_prefix(K.wait_keys, enc(run))) do
    local parts, pos = take(m, #prefix + 1, 1)
    if not parts then
      corrupt("wait key", m, "bad member")
    end
    local wid = string.sub(m, 1, pos - 1)
    if wid ~= last then
      out[#out + 1] = { wid = wid, effect = dec(parts[1]) }
      last = wid
    end
  end
  return out
end

-- ARGV[2 ..]: run, effect, kind, step, phase, case, from_source ("" for
-- none), then (namespace, value) pairs.
local function sub_args()
  local args = ARGV
  local run, effect, kind, from = args[2], args[3], args[4], args[8]
  return {
    run = run,
    effect = effect,
    kind = kind,
    from = from,
    wid = enc(run) .. enc(effect),
    attrs = { "w1", kind, args[5], args[6], args[7], from },
    nv = (key_args(9)),
  }
end
