-- uses: lib cond_lib
-- Look at a waiter of a Cond and renew its place. It does not take the
-- signal (cond_leave.lua does), so a lost reply loses nothing.
--
-- ARGV[1] waiter, ARGV[2] lease ms
-- Reply: 1 signalled; 0 still waiting; 2 gone (its place lapsed while its
-- process could not renew it: it wakes as if signalled).
prune()
local lease = tonumber(ARGV[2])
local signalled = redis.call('sismember', KEYS[3], ARGV[1]) == 1
if not signalled and not redis.call('zscore', KEYS[1], ARGV[1]) then
  return 2
end
redis.call('zadd', KEYS[2], now + lease, ARGV[1])
keep_all(lease)
if signalled then
  return 1
end
return 0
