-- Remove a waiter that gave up from the queue, and wake those behind it that
-- now fit (a large request leaving the head may unblock smaller ones).
--
-- ARGV[1] waiter id, ARGV[2] channel prefix
-- Reply: 1 removed, 0 it was not queued.
local now = now_ms()
local removed = redis.call('zrem', KEYS[4], ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
redis.call('zrem', KEYS[6], ARGV[1])
local pruned = prune(now)
if removed == 1 or pruned then wake(ARGV[2]) end
return removed
