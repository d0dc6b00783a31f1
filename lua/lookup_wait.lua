-- lookup_wait: one wait, with its mark and the event its claim holds.
--
-- KEYS[1] marks: agentplane:{<tenant>}:mark
-- KEYS[2] geometry: agentplane:{<tenant>}:buckets
-- Then the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the call reads or writes, as many as it names
--   (NEED asks for more)
-- ARGV[1] run: the wait's run
-- ARGV[2] effect: the wait's effect
-- Returns: {"WAIT", subscription, parked_at or "", held event's eid or ""} | {"NONE"}
--   subscription = {run, effect, attributes text, {namespace, value, ...}}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua

return guard(function()
  local run, effect = ARGV[1], ARGV[2]
  local wid = enc_pair(run, effect)
  local attrs, rows = wait_read(wid, run)
  if not attrs then
    return words("NONE")
  end
  local mark, held = mark_read(wid)
  return { "WAIT", sub_reply(run, effect, wid, attrs, rows), mark_parked_at(mark), held or "" }
end)
