-- uses: lib
-- Record how many goroutines of a Client wait for a mutex inside their
-- process (its local queue), so that Inspect counts the waiters of the
-- holder's own Client too (see mutex_acquire.lua for the waiting count).
-- The entry lives one lease unless written again (a Client whose
-- goroutines keep waiting rewrites it every lease/3), so a Client that
-- died leaves none for longer.
--
-- KEYS[1] the waiting hash "<client> <wait>" -> "<waiters> <expiry ms>"
-- ARGV[1] the field ("<client> local"), ARGV[2] the goroutines waiting
-- ("0": remove the entry), ARGV[3] the lease in ms
-- Reply: 1 written, 0 removed.
if ARGV[2] == '0' then
  redis.call('hdel', KEYS[1], ARGV[1])
  return 0
end
local now = server_now()
redis.call('hset', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. fmt(now + tonumber(ARGV[3])))
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return 1
