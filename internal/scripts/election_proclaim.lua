-- uses: lib election_lib
-- Proclaim a new value in the current term.
--
-- KEYS[1] lock, KEYS[2] record list
-- ARGV[1] owner, ARGV[2] token (the term), ARGV[3] value, ARGV[4] record
-- lifetime in ms, ARGV[5] change channel
-- Reply: 1 proclaimed (or the value was already current); 0 the lock is
-- not the owner's in this term.
local o, t = holder(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] then
  return 0
end
local ver, term, owner, since, value = last_entry(KEYS[2])
local ms, us = server_now()
if term ~= ARGV[2] or owner ~= ARGV[1] then
  -- The record is gone (the list expired, or Redis lost it) while the lock
  -- is held: write it again, the term's start as of now.
  since = fmt(ms)
elseif value == ARGV[3] then
  redis.call('pexpire', KEYS[2], ARGV[4])
  return 1 -- no change, no message
end
ver = append(KEYS[2], ver or 0, ARGV[2], since, ARGV[1], ARGV[3], us)
redis.call('pexpire', KEYS[2], ARGV[4])
redis.call('publish', ARGV[5], fmt(ver))
return 1
