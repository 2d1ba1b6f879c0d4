-- uses: lib cond_lib
-- Register a waiter of a Cond, before its Wait releases the lock: a Signal
-- or Broadcast from then on finds it.
--
-- ARGV[1] waiter, ARGV[2] lease ms. Reply: 1.
prune()
local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores')
local score = now_us
if last[2] and tonumber(last[2]) >= score then
  score = tonumber(last[2]) + 1
end
local lease = tonumber(ARGV[2])
redis.call('zadd', KEYS[1], string.format('%.0f', score), ARGV[1])
redis.call('zadd', KEYS[2], now + lease, ARGV[1])
keep_all(lease)
return 1
