-- Waits: rows (which carry the attributes), election entries and parked marks.
--
-- A wait (run, effect) is "wid" = enc(run) . enc(effect). It is registered
-- exactly while it has a row: the field wid of its run's wait bucket
-- (buckets.lua, WAIT), "attrs" then each key row's "ns value . created_at"
-- (wait_parse), where "attrs" = enc(kind) . step . "f" | "c" . " " .
-- enc(case) . enc(from_source) ("" for none) are those of its first
-- registration; and a member per instant its key rows were registered at,
-- scored by it, in the registration order's time buckets (TIME.order, below,
-- and buckets.lua). wait_count
-- counts registered waits. A key row has an
-- election entry, in the key bucket of (kind, key) (election_entry), exactly
-- while its wait is unparked and its run unsealed, so elections never pass
-- over anything. A mark is marks[wid] = parked_at, then for a
-- wait holding a claim a space and the eid of the row it holds (the claim
-- ledger: a wait holding a claim is parked), plus one mark_index member:
-- "L" . wid (registered, run unsealed: listed by parked_waits), "B" . wid
-- (bare) or "S" . wid (run sealed: retired by parked_waits).
--
-- Attributes travel as they are stored: a table {text, kind, from_source}
-- of the row's attribute text ("attrs" above) and its kind and
-- from_source components (from_source " " for none), and replies carry the
-- text, which Python decodes (codec.wait_attrs).

local A_TEXT, A_KIND, A_FROM = 1, 2, 3

-- The registration order: time buckets of the waits by created_at, one
-- member per instant a wait's key rows were registered at: "wid" for the
-- earliest, "wid . instant" for each later one (TIME.order.members).
TIME.order = TIME.family("wait_order", "wait_order_index", "order", "wait:order:", "O", "Q", false)

-- The registration order's members of a wait's key rows (wait_parse's): a
-- list of {at, member}, earliest first.
function TIME.order.members(wid, rows)
  local ats, seen = {}, {}
  for _, row in ipairs(rows) do
    if not seen[row.at] then
      seen[row.at] = true
      ats[#ats + 1] = row.at
    end
  end
  if #ats > 1 then
    table.sort(ats, bytes_lt) -- 16 digits each: bytes order is time order
  end
  local out = { { at = ats[1], member = wid } }
  for i = 2, #ats do
    out[i] = { at = ats[i], member = wid .. ats[i] }
  end
  return out
end

-- The attributes of a wait the caller describes: kind, step (decimal),
-- phase, case and from_source ("" for none) as sent.
local function attrs_of(kind, step, phase, case, from)
  local kind_c, from_c = enc(kind), enc(from)
  return { kind_c .. step .. (phase == "compensating" and "c" or "f") .. TERM .. enc(case) .. from_c, kind_c, from_c }
end

-- A wait's row, the field wid of its run's wait bucket (buckets.lua, WAIT):
-- its attributes, then each key row's namespace and value (components) and
-- created_at (16 digits), in byte order of the keys. Read by plain finds at
-- the components' terminators: no pattern runs over a field's bytes. Returns
-- the attributes (attrs_of's table) and a list of {nv = encoded ns value,
-- ns, value (encoded), at = instant key}.
local function wait_parse(wid, m)
  local parts, pos = take(m, 1, 4)
  local step = parts and string.match(parts[2], "^(%d+)[fc] $")
  if not step or parts[1] == TERM or not is_step(step) then
    corrupt("wait", wid, "bad attributes")
  end
  local attrs, rows, n = { string.sub(m, 1, pos - 1), parts[1], parts[4] }, {}, 0
  while pos <= #m do
    local kv, after = take(m, pos, 2)
    local at = kv and string.sub(m, after, after + INSTANT_WIDTH - 1)
    if not kv or #at ~= INSTANT_WIDTH or string.find(at, "%D") then
      corrupt("wait", wid, "bad key row")
    end
    n = n + 1
    rows[n] = { nv = kv[1] .. kv[2], ns = kv[1], value = kv[2], at = at }
    pos = after + INSTANT_WIDTH
  end
  if n == 0 then
    corrupt("wait", wid, "no key rows")
  end
  return attrs, rows
end

-- The wait's attributes and key rows (wait_parse's), read once; nil when the
-- wait is not registered. Answers NEED (before any write) when the call did
-- not name its run's wait bucket. run: the wait's run, when the caller has it.
local function wait_read(wid, run)
  local bucket = WAIT.named(run or wid_run(wid))
  local m = redis.call("HGET", bucket, wid)
  if not m then
    return nil, nil
  end
  return wait_parse(wid, m)
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

-- The marks of a run's waits, read from their index (a mark's member there is
-- of its class, invariant 4): the wids, class by class ("L", "B", "S", or the
-- classes given: an unsealed run has no "S"), and each one's class by wid. A
-- wait of the run not among them has no mark.
local function run_marks(run, classes)
  local prefix, wids, class_of = enc(run), {}, {}
  for _, class in ipairs(classes or { "L", "B", "S" }) do
    for _, m in ipairs(with_prefix(K.mark_index, class .. prefix)) do
      local wid = string.sub(m, 2)
      wids[#wids + 1], class_of[wid] = wid, class
    end
  end
  return wids, class_of
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

-- The first election entries under hash h in key bucket `bucket`: of the
-- waits open to any sender and of those of sender `source` (a component),
-- each a member or nil, and the two groups' prefixes. Both groups sort under
-- h .. "~", the open waits first (TERM sorts below a component's bytes), so
-- one read of the first WAIT.HEADS entries finds both unless there are that
-- many.
function WAIT.heads(bucket, h, source)
  local any, own = h .. "~" .. TERM, h .. "~" .. source
  local all = redis.call("ZRANGEBYLEX", bucket, "[" .. h .. "~", "(" .. h .. "~\255", "LIMIT", "0", WAIT.HEADS)
  local first, mine, n = all[1], nil, #all
  if first and string.sub(first, 1, #any) ~= any then
    first = nil
  end
  for i = 1, n do
    if string.sub(all[i], 1, #own) == own then
      mine = all[i]
      break
    end
  end
  if not mine and n == WAIT.HEADS then
    mine = redis.call("ZRANGEBYLEX", bucket, "[" .. own, "(" .. own .. "\255", "LIMIT", "0", "1")[1]
  end
  return first, mine, any, own
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
    stored, rows = wait_read(wid, run)
  end
  local bucket = WAIT.named(run)
  local marked, sealed = redis.call("HGET", K.marks, wid), is_sealed(run)
  local in_force = stored or attrs
  local at_key = instant_key(at)
  local have, all, at_seen = {}, {}, false
  for i, row in ipairs(rows or {}) do
    have[row.nv], all[i] = true, row
    at_seen = at_seen or row.at == at_key
  end
  local added = {}
  for _, nv in ipairs(nv_list) do
    if not have[nv] then
      have[nv] = true
      added[#added + 1] = nv
      all[#all + 1] = { nv = nv, at = at_key }
    end
  end
  -- The registration order gains a member for the instant, unless the wait
  -- has rows of it already; one earlier than its earliest takes "wid" over.
  local slots, gone = {}, {}
  if #added > 0 and not at_seen then
    local first = rows and TIME.order.members(wid, rows)[1].at
    if not first then
      slots[1] = TIME.order:slot(at_key, wid, true)
    elseif bytes_lt(first, at_key) then
      slots[1] = TIME.order:slot(at_key, wid .. at_key, true)
    else
      gone[1] = TIME.order:slot(first, wid, false)
      slots[1] = TIME.order:slot(first, wid .. first, true)
      slots[2] = TIME.order:slot(at_key, wid, true)
    end
  end
  local elects = electable and not marked and not sealed and #added > 0
  if elects then
    election_checked(in_force, added)
    split_checked()
  end
  if not stored then
    WAIT.split_checked()
  end
  need_checked()
  if #added > 0 then
    if #all > 1 then
      table.sort(all, function(a, b)
        return bytes_lt(a.nv, b.nv)
      end)
    end
    local text = { in_force[A_TEXT] }
    for i, row in ipairs(all) do
      text[i + 1] = row.nv .. row.at
    end
    redis.call("HSET", bucket, wid, table.concat(text))
  end
  for i, slot in ipairs(slots) do
    TIME.order:apply(slot, true)
    if i == 1 then -- "wid" leaves its instant once "wid . instant" holds the bucket
      TIME.order:remove_all(gone)
    end
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
    WAIT.grow(bucket)
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

-- The registration order's slots of a wait's members (rows: its key rows,
-- when the caller has read them), noted in the rows (rows.slots), and the
-- buckets not named noted for NEED: a caller that retires the wait calls it
-- before need_checked and its first write. Returns the rows.
function TIME.order.checked(wid, rows)
  rows = rows or key_rows(wid)
  if not rows.slots then
    rows.slots = {}
    for i, g in ipairs(TIME.order.members(wid, rows)) do
      rows.slots[i] = TIME.order:slot(g.at, g.member, false)
    end
  end
  return rows
end

-- Removes the wait's key rows, index entries and mark; rows: its key rows,
-- when the caller has read them (and checked them with TIME.order.checked).
-- Returns 1 when the wait was registered, else 0.
local function retire_wait(wid, attrs, rows, marked)
  -- marked: whether the wait has a mark, where the caller read it (run_marks).
  local parked = marked ~= false and mark_clear(wid)
  if not attrs then
    return 0
  end
  rows = TIME.order.checked(wid, rows)
  need_checked()
  TIME.order:remove_all(rows.slots)
  local bucket = WAIT.named(wid_run(wid))
  redis.call("HDEL", bucket, wid)
  for _, row in ipairs(rows) do
    if not parked then -- a parked wait's rows are out of the election indexes
      local bucket, m = election_entry(attrs, row.nv, row.at, wid)
      need_checked()
      redis.call("ZREM", bucket, m)
    end
  end
  redis.call("INCRBY", K.wait_count, "-1")
  return 1
end

-- The usual wait, retired field by field: registered with one key row, its
-- claim (if any) a row held for it, its election entry's key bucket named by
-- the call. Where the call named the order bucket holding its member, found
-- by the member's score (TIME:named_holding), the wait leaves it with no
-- geometry, index or left list read, and a bucket emptied, or left with only
-- the members on its left list, leaves the index.
-- Else it leaves the bucket holding its instant, directly where the call
-- named that, or by the bucket's left list (buckets.lua, TIME), unless that
-- is then due for tidying. m: its row, mark: its mark as stored. Reads
-- and checks everything before its first write, then writes as retire_wait and
-- shed do; answers false, having written nothing, for any other wait, which
-- the general path retires (and reports, if corrupt) from what was read.
function WAIT.retire_usual(wid, bucket, m, mark)
  local kind_end = string.find(m, TERM, 1, true)
  local step_end = kind_end and string.find(m, TERM, kind_end + 1, true)
  local case_end = step_end and string.find(m, TERM, step_end + 1, true)
  local attrs_end = case_end and string.find(m, TERM, case_end + 1, true)
  local ns_end = attrs_end and string.find(m, TERM, attrs_end + 1, true)
  local key_end = ns_end and string.find(m, TERM, ns_end + 1, true)
  local created = string.sub(m, -INSTANT_WIDTH)
  if not key_end or #m ~= key_end + INSTANT_WIDTH or string.find(created, "%D") then
    return false
  end
  local key, start = TIME.order:named_holding(created, wid) -- its bucket, if named
  local direct, listed = key ~= nil, false
  if not direct then
    start = TIME.order:holding(created)
    if not start then
      return false
    end
    local left = TIME.order:left(start)
    key = TIME.order:key(start)
    listed = not named(key)
    if listed and (left.n + 1 >= TIME.TIDY or left.n + 1 >= left.entries) then
      return false
    end
  end
  local nv, attrs = string.sub(m, attrs_end + 1, key_end), nil
  if not mark then -- unparked, it leaves the election: its entry's bucket named?
    attrs = { false, string.sub(m, 1, kind_end), string.sub(m, case_end + 1, attrs_end) }
    if not select(2, key_bucket(attrs[A_KIND] .. nv)) then
      return false
    end
  end
  -- Its held row last: the general path reads it again only where it is corrupt.
  local held, raw, nl = mark_held(mark), nil, nil
  if held then
    raw = redis.call("HGET", K.events, held)
    nl = raw and string.find(raw, "\n", 1, true)
    if not nl or string.sub(raw, 1, 1) ~= "H" or string.sub(raw, 22, 21 + #wid) ~= wid then
      return false
    end
  end
  if direct then
    redis.call("ZREM", key, wid)
    local entries = redis.call("HINCRBY", K.wait_order, start, "-1")
    if entries <= 0 then
      TIME.order:emptied(start)
    elseif entries < TIME.TIDY and redis.call("HEXISTS", K.wait_order, "g" .. start) == 1 then
      -- Where only members on its left list remain (a list holds fewer than
      -- TIME.TIDY), they go, and the bucket with them.
      local left = TIME.order:left(start)
      if left.n >= left.entries then
        TIME.order:count(start, -TIME.order:tidy(key, start))
      end
    end
  else
    TIME.order:remove_all({ { member = wid, start = start, key = not listed and key } })
  end
  if mark then -- (as read: none to clear where the wait has none)
    mark_clear(wid)
  end
  redis.call("HDEL", bucket, wid)
  if attrs then
    local bucket, entry = election_entry(attrs, nv, created, wid) -- (its key bucket)
    redis.call("ZREM", bucket, entry)
  end
  redis.call("INCRBY", K.wait_count, "-1")
  if raw then
    shed_stored(held, raw, nl)
  end
  return true
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

-- The rows of a run's waits in its wait bucket, {wid, row, ...}, whose other
-- runs' rows the server passes over (a glob of the run's component).
function WAIT.run_rows(run)
  return fields_with_prefix(WAIT.named(run), enc(run))
end

-- The registered waits of a run, in effect order: a list of {wid, effect,
-- attrs, rows} (wait_parse's); flat: its rows (run_rows), where read already.
local function run_waits(run, flat)
  local prefix, out = enc(run), {}
  flat = flat or WAIT.run_rows(run)
  for i = 1, #flat, 2 do
    local wid = flat[i]
    wid_ends(wid)
    local attrs, rows = wait_parse(wid, flat[i + 1])
    out[#out + 1] = { wid = wid, effect = dec(string.sub(wid, #prefix + 1)), attrs = attrs, rows = rows }
  end
  table.sort(out, function(a, b)
    return bytes_lt(a.wid, b.wid)
  end)
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
