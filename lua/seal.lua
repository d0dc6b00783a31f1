-- seal: mark a run sealed (first seal wins); its waits stop being matched.
--
-- KEYS[1] wait_order: agentplane:{<tenant>}:wait:order
-- KEYS[2] wait_order_index: agentplane:{<tenant>}:wait:order:index
-- KEYS[3] marks: agentplane:{<tenant>}:mark
-- KEYS[4] mark_index: agentplane:{<tenant>}:mark:index
-- KEYS[5] seals: agentplane:{<tenant>}:seal
-- KEYS[6] timer_walk: agentplane:{<tenant>}:timer:walk
-- KEYS[7] timer_held: agentplane:{<tenant>}:timer:held
-- KEYS[8] timer_held_fire: agentplane:{<tenant>}:timer:held:fire
-- KEYS[9] timer_claims: agentplane:{<tenant>}:timer:claim
-- KEYS[10] geometry: agentplane:{<tenant>}:buckets
-- KEYS[11] timer_bucket: agentplane:{<tenant>}:timer:<bucket>
-- KEYS[12] replies: agentplane:{<tenant>}:reply
-- KEYS[13] replies_old: agentplane:{<tenant>}:reply:old
-- Then the time buckets (agentplane:{<tenant>}:wait:order:<start>), the key buckets
--   (agentplane:{<tenant>}:event:key:<bucket>) and the wait buckets (agentplane:{<tenant>}:wait:<bucket>) the
--   call reads or writes, as many as it names (NEED asks for more)
-- ARGV[1] at: instant ms, "" reads the server clock
-- ARGV[2] run: the run
-- Returns: {"NEW", at} | {"SEEN", at}
-- Errors: CORRUPT

--@include _lib/codec.lua
--@include _lib/core.lua
--@include _lib/buckets.lua
--@include _lib/waits.lua
--@include _lib/matching.lua
--@include _lib/timers.lua

return guard(function()
  local at, run = instant_arg(ARGV[1]), ARGV[2]
  if is_sealed(run) then
    return words("SEEN", decimal(at))
  end
  local waits, timers = run_waits(run), run_timers(run)
  local wids, marked = run_marks(run, { "L", "B" })
  for _, w in ipairs(waits) do
    if not marked[w.wid] then -- unparked, it leaves the election
      election_checked(w.attrs, w.rows)
    end
  end
  need_checked()
  seal_run(run, at, { waits = waits, marks = wids, marked = marked })
  -- Held timers return to the walk, so the next claim_due retires them.
  expose_timers(timers)
  return words("NEW", decimal(at))
end)
