-- uses: lib election_lib
-- Begin a term: the caller has just acquired the election's lock.
--
-- KEYS[1] lock, KEYS[2] record list
-- ARGV[1] owner, ARGV[2] token (the term), ARGV[3] value, ARGV[4] record
-- lifetime in ms, ARGV[5] change channel
-- Reply: 1 begun; 2 this term was already begun (the owner re-entered the
-- lock it leads with); 0 the lock is not (or no longer) the owner's.
local o, t = holder(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] then
  return 0
end
local ver, term, owner = last_entry(KEYS[2])
if term == ARGV[2] and owner == ARGV[1] then
  return 2
end
local ms, us = server_now()
ver = ver or 0
if term and term ~= '0' then
  -- The last leader lost its lease without resigning: no message told
  -- anyone, so record its end before the new term, in order.
  ver = append(KEYS[2], ver, '0', '0', '', '', us)
end
ver = append(KEYS[2], ver, ARGV[2], fmt(ms), ARGV[1], ARGV[3], us)
redis.call('pexpire', KEYS[2], ARGV[4])
redis.call('publish', ARGV[5], fmt(ver))
return 1
