-- acknowledge: forget the remembered replies a closing store has received.
--
-- KEYS[1] replies: agentplane:{<tenant>}:reply
-- KEYS[2] replies_old: agentplane:{<tenant>}:reply:old
-- Flags: allow-oom (its net effect frees memory: it runs under maxmemory)
-- Returns: {"OK"}
-- Errors: none

--@include _lib/codec.lua
--@include _lib/core.lua

-- Sent with the call token "": nothing is remembered, and guard forgets ACKS.
return guard(function()
  return words("OK")
end)
