-- uses: lib election_lib
-- End a term, before its lock is released: record "no leader".
--
-- KEYS[1] lock, KEYS[2] record list
-- ARGV[1] owner, ARGV[2] token (the term), ARGV[3] record lifetime in ms,
-- ARGV[4] change channel
-- Reply: 1 the lock is the owner's in this term (the caller releases it
-- next); 0 it is not: nothing changed. Repeating it is harmless.
local o, t = holder(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] then
  return 0
end
local ver, term = last_entry(KEYS[2])
if term ~= '0' then
  -- The term's record, or none at all (lost while the lock was held): the
  -- observers learn that this term ended either way.
  local _, us = server_now()
  ver = append(KEYS[2], ver or 0, '0', '0', '', '', us)
  redis.call('pexpire', KEYS[2], ARGV[3])
  redis.call('publish', ARGV[4], fmt(ver))
end
return 1
