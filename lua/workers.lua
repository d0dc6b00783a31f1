-- workers: the tenant's registry of running workers.
--
-- KEYS[1] workers: agentplane:{<tenant>}:workers
-- Returns: {"OK", {worker id, "<last beat ms> <record JSON>", ...}}
-- Errors: none

--@include _lib/codec.lua

return { "OK", redis.call("HGETALL", K.workers) }
