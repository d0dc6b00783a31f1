-- Waits: key rows (which carry the attributes), election entries and parked marks.
--
-- A wait (run, effect) is "wid" = enc(run) . enc(effect). It is registered
-- exactly while it has key rows: "wid . attrs . ns value . created_at" in
-- wait_keys, one per correlation key, each carrying the wait's attributes
-- "attrs" = enc(kind) . step . "f" | "c" . " " . enc(case) . enc(from_source)
-- ("" for none), those of its first registration; and "wid . ns value",
-- scored by created_at, in the registration order's time buckets (TIME.order,
-- buckets.lua). wait_count counts registered waits. A key row has an
-- election entry, in the key bucket of (kind, key) (election_entry), exactly
-- while its wait is unparked and its run unsealed, so elections never pass
-- over anything. A mark is marks[wid] = parked_at, then for a
-- wait holding a claim a space and the eid of the row it holds (the claim
-- ledger: a wait holding a claim is parked), plus one mark_index member:
-- "L" . wid (registered, run unsealed: listed by parked_waits), "B" . wid
-- (bare) or "S" . wid (run sealed: retired by parked_waits).
--
-- Attributes travel as they are stored: a table {text, kind, from_source}
-- of the key rows' attribute text ("attrs" above) and its kind and
-- from_source components (from_source " " for none), and replies carry the
-- text, which Python decodes (codec.wait_attrs).

local A_TEXT, A_KIND, A_FROM = 1, 2, 3

-- The registration order: time buckets of "wid . ns value" by created_at.
TIME.order = TIME.family("wait_order", "wait_order_index", "order", "wait:order:", "O", "Q", false)

-- The attributes of a wait the caller describes: kind, step (decimal),
-- phase, case and from_source ("" for none) as sent.
local function attrs_of(kind, step, phase, case, from)
  local kind_c, from_c = enc(kind), enc(from)
  return { kind_c .. step .. (phase == "compensating" and "c" or "f") .. TERM .. enc(case) .. from_c, kind_c, from_c }
end

-- A key row after its wid: kind, step, phase, case, from_source, namespace,
-- value, created_at.
local KEY_ROW = "^([^ ]* )(%d+)([fc]) ([^ ]* )([^ ]* )(([^ ]* )([^ ]* ))(%d+)$"
-- What follows the attributes in a key row: namespace, value, created_at.
local KEY_TAIL = "^(([^ ]* )([^ ]* ))(%d+)$"
-- A key row longer than this is split at its terminators by plain finds: a
-- pattern reads every byte of its components, one by one.
local SHORT_KEY_ROW = 512

-- KEY_ROW's captures of a key row m from from, split at its terminators (the
-- step and phase end in one too); nil when it is not a key row.
local function key_row_split(m, from)
  local parts, pos = take(m, from, 6)
  local step, ph = parts and string.match(parts[2], "^(%d+)([fc]) $")
  if not step or pos > #m or string.find(m, "%D", pos) then
    return nil
  end
  local kind, case, source, ns, value = parts[1], parts[3], parts[4], parts[5], parts[6]
  return kind, step, ph, case, source, ns .. value, ns, value, string.sub(m, pos)
end

-- The wait's attributes and key rows, read once: its attributes (attrs_of's
-- table) and a list of {nv = encoded ns value, at =
-- instant key, ns, value (encoded), m = the member}; nil when the wait is not
-- registered. Every key row carries the same attributes; each is checked: a
-- row after the first that starts with the first's attributes reads only what
-- follows them.
local function wait_read(wid)
  local members = with_prefix(K.wait_keys, wid)
  if #members == 0 then
    return nil, nil
  end
  local attrs, head, rows, from = nil, nil, {}, #wid + 1
  for i, m in ipairs(members) do
    local kind, step, ph, case, source, nv, ns, value, at
    local same = head and string.find(m, head, from, true) == from
    if same then -- the first row's attributes: only what follows them is read
      nv, ns, value, at = string.match(m, KEY_TAIL, from + #head)
      kind = nv
    elseif #m - from < SHORT_KEY_ROW then
      kind, step, ph, case, source, nv, ns, value, at = string.match(m, KEY_ROW, from)
    else
      kind, step, ph, case, source, nv, ns, value, at = key_row_split(m, from)
    end
    if not kind or #at ~= INSTANT_WIDTH then
      corrupt("wait key", m, "bad member")
    end
    if not head then
      if kind == TERM or not is_step(step) then
        corrupt("wait", wid, "bad attributes")
      end
      head = string.sub(m, from, #m - #nv - INSTANT_WIDTH)
      attrs = { head, kind, source }
    elseif not same and string.sub(m, from, #m - #nv - INSTANT_WIDTH) ~= head then
      corrupt("wait", wid, "key rows disagree on the attributes")
    end
    rows[i] = { nv = nv, at = at, ns = ns, value = value, m = m }
  end
  return attrs, rows
end

local function is_sealed(run)
  return redis.call("HEXISTS", K.seals, run) == 1
end

local function is_marked(wid)
  return redis.call("HEXISTS", K.marks, wid) == 1
end

-- The eid of the row a mark's value says its wait holds; nil when none (or no mark).
local function mark_held(mark)
  local space = mark and string.find(mark, " ", 1, true)
  return space and string.sub(mark, space + 1) or nil
end

-- A mark's parked_at (decimal ms); "" for no mark.
local function mark_parked_at(mark)
  if not mark then
    return ""
  end
  local space = string.find(mark, " ", 1, true)
  return space and string.sub(mark, 1, space - 1) or mark
end

-- The wait's mark, as stored, and the eid of the row it holds; false, nil without one.
local function mark_read(wid)
  local mark = redis.call("HGET", K.marks, wid)
  return mark, mark_held(mark)
end

-- The wait's key rows (wait_read's), none when it is not registered.
local function key_rows(wid)
  local _, rows = wait_read(wid)
  return rows or {}
end

-- A key row's election entry (buckets.lua, "Key buckets"): the key bucket of
-- (kind, key), false where the call did not name it (noted for NEED), and the
-- member: the key's hash, "~", from_source (" " for none), created_at, wid.
local function election_entry(attrs, nv, at, wid)
  local h, bucket = key_bucket(attrs[A_KIND] .. nv)
  return bucket, h .. "~" .. attrs[A_FROM] .. at .. wid
end

-- Notes for NEED the key buckets of the election entries of the wait's rows
-- (its attributes attrs; rows: a list of key rows, or of encoded keys): what
-- a call checks (need_checked) before its first write, where it will put the
-- wait up for election or take it out.
local function election_checked(attrs, rows)
  if attrs then
    for _, row in ipairs(rows or {}) do
      key_bucket(attrs[A_KIND] .. (row.nv or row))
    end
  end
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
    local bucket, m = election_entry(attrs, row.nv, row.at, wid)
    need_checked()
    if add then
      redis.call("ZADD", bucket, "0", m)
    else
      redis.call("ZREM", bucket, m)
    end
  end
end

-- Puts the key rows register added (ns values added, created_at = at) of an
-- unparked wait of an unsealed run up for election; its older rows are up already.
local function elect_new(wid, attrs, added, at)
  local at_key = instant_key(at)
  for _, nv in ipairs(added) do
    local bucket, m = election_entry(attrs, nv, at_key, wid)
    need_checked()
    redis.call("ZADD", bucket, "0", m)
  end
end

-- Adds the key rows the wait lacks (created_at = at); a new wait takes attrs.
-- Returns the attributes in force, its mark (false: none), whether its run
-- is sealed, the ns values of the rows it added, whether the wait was
-- registered before, and its key rows before this call (nil when it was not).
-- electable = false leaves new rows out of the election indexes (the caller
-- parks the wait next, or puts them up with elect_new): a wait not registered
-- before then has none in them (UNLISTED).
-- read: {attrs, rows} of the wait, when the caller has read them (wait_read's).
-- A wait put up for election has its key buckets checked (and, to split, the
-- two the next split writes) before the first write.
local function register(run, wid, attrs, nv_list, at, electable, read)
  local stored, rows
  if read then
    stored, rows = read[1], read[2]
  else
    stored, rows = wait_read(wid)
  end
  local marked, sealed = redis.call("HGET", K.marks, wid), is_sealed(run)
  local in_force = stored or attrs
  local at_key = instant_key(at)
  local have = {}
  for _, row in ipairs(rows or {}) do
    have[row.nv] = true
  end
  local head = wid .. in_force[A_TEXT]
  local by_wid, slots, added = {}, {}, {}
  for _, nv in ipairs(nv_list) do
    if not have[nv] then
      added[#added + 1] = nv
      by_wid[#by_wid + 1] = head .. nv .. at_key
      slots[#slots + 1] = TIME.order:slot(at_key, wid .. nv, true)
    end
  end
  local elects = electable and not marked and not sealed and #added > 0
  if elects then
    election_checked(in_force, added)
    key_split_checked()
  end
  need_checked()
  zadd_all(K.wait_keys, by_wid)
  for _, slot in ipairs(slots) do
    TIME.order:apply(slot, true)
  end
  if elects then
    elect_new(wid, in_force, added, at)
    key_grow(election_entry(in_force, added[1], at_key, wid))
  end
  if not stored and #added > 0 then
    redis.call("INCRBY", K.wait_count, "1")
    if marked and not sealed then
      redis.call("ZREM", K.mark_index, "B" .. wid)
      redis.call("ZADD", K.mark_index, "0", "L" .. wid)
    end
  end
  return in_force, marked, sealed, added, stored ~= nil, rows
end

-- Sets the wait's mark to parked_at = at, holding the row held (an eid) when
-- given; attrs is nil for an unregistered wait (a wait parked already needs
-- none); rows: its key_rows, when the caller has read them, or UNLISTED;
-- sealed: whether its run is sealed, when the caller knows (a wait from an
-- election index: not sealed), else nil.
local function park(run, wid, attrs, at, rows, sealed, held)
  local parked_at = decimal(at)
  if redis.call("HSET", K.marks, wid, held and parked_at .. " " .. held or parked_at) == 0 then
    return -- parked already: only parked_at changes
  end
  if sealed == nil then
    sealed = is_sealed(run)
  end
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
-- original registration times; rows: its key rows, when the caller has read them.
local function unpark(run, wid, attrs, rows)
  mark_clear(wid)
  if attrs and not is_sealed(run) then
    electable_set(wid, attrs, true, rows)
  end
end

-- The registration order's slots of a wait's key rows (rows: its key rows,
-- when the caller has read them), noted in the rows (row.order), and the
-- buckets not named noted for NEED: a caller that retires the wait calls it
-- before need_checked and its first write. Returns the rows.
function TIME.order.checked(wid, rows)
  rows = rows or key_rows(wid)
  for _, row in ipairs(rows) do
    row.order = row.order or TIME.order:slot(row.at, wid .. row.nv, false)
  end
  return rows
end

-- Removes the wait's key rows, index entries and mark; rows: its key rows,
-- when the caller has read them (and checked them with TIME.order.checked).
-- Returns 1 when the wait was registered, else 0.
local function retire_wait(wid, attrs, rows)
  local parked = mark_clear(wid)
  if not attrs then
    return 0
  end
  rows = TIME.order.checked(wid, rows)
  need_checked()
  local slots = {}
  for i, row in ipairs(rows) do
    slots[i] = row.order
  end
  TIME.order:remove_all(slots)
  for _, row in ipairs(rows) do
    redis.call("ZREM", K.wait_keys, row.m)
    if not parked then -- a parked wait's rows are out of the election indexes
      local bucket, m = election_entry(attrs, row.nv, row.at, wid)
      need_checked()
      redis.call("ZREM", bucket, m)
    end
  end
  redis.call("INCRBY", K.wait_count, "-1")
  return 1
end

-- A Subscription reply: {run, effect, attributes text, {ns, value, ...}}, keys
-- sorted; rows: the wait's key_rows, when the caller has read them.
local function sub_reply(run, effect, wid, attrs, rows)
  local keys = {}
  for _, row in ipairs(rows or key_rows(wid)) do
    keys[#keys + 1] = dec(row.ns)
    keys[#keys + 1] = dec(row.value)
  end
  return { run, effect, attrs[A_TEXT], keys }
end

-- {status, at, subscription} for a writing call's reply (RESUMED, MATCHED), with
-- the text it is remembered as (core.lua's serialize of it) written directly.
local function sub_status(status, at, sub)
  local run, effect, attrs, keys = sub[1], sub[2], sub[3], sub[4]
  local text = "*3:" .. (DOLLAR[#status] or dollar(#status)) .. status .. (DOLLAR[#at] or dollar(#at)) .. at
    .. "*4:" .. (DOLLAR[#run] or dollar(#run)) .. run .. (DOLLAR[#effect] or dollar(#effect)) .. effect
    .. (DOLLAR[#attrs] or dollar(#attrs)) .. attrs
  if #keys == 2 then -- one correlation key, the usual
    local ns, value = keys[1], keys[2]
    text = text .. "*2:" .. (DOLLAR[#ns] or dollar(#ns)) .. ns .. (DOLLAR[#value] or dollar(#value)) .. value
  else
    local out = {}
    text = text .. table.concat(out, "", 1, serialize(keys, out, 0))
  end
  return { status, at, sub, text = text }
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
    wid = enc_pair(run, effect),
    nv = (key_args(9)),
  }
end

-- The attributes of sub_args' wait, as its arguments describe them.
local function sub_attrs()
  local args = ARGV
  return attrs_of(args[4], args[5], args[6], args[7], args[8])
end
