-- is_sealed: whether the tenant holds a seal for a run.
--
-- KEYS[1] seals: agentplane:{<tenant>}:seal
-- ARGV[1] run: the run
-- Returns: {"OK", 1 | 0}
-- Errors: none

return { "OK", redis.call("HEXISTS", K.seals, ARGV[1]) }
