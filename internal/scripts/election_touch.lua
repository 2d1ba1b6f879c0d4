-- uses: lib election_lib
-- Keep the record of a live term: its lifetime follows the lock's lease,
-- which the watchdog renews (the lock's renewal does not know the record).
--
-- KEYS[1] lock, KEYS[2] record list
-- ARGV[1] owner, ARGV[2] token (the term), ARGV[3] record lifetime in ms
-- Reply: 1 the term goes on; 0 the lock is no longer the owner's.
local o, t = holder(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] then
  return 0
end
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
