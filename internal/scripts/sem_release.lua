-- Release n permits of an owner and wake the waiters that now fit.
--
-- ARGV[1] owner, ARGV[2] n, ARGV[3] channel prefix, ARGV[4] size
-- Reply: {1, left} released, left permits still held by the owner;
-- {0, held} the owner holds fewer than n (held), and nothing changed;
-- {-1, size} the semaphore exists with another size, and nothing changed.
local now = now_ms()
local stored = redis.call('hget', KEYS[1], 'size')
if stored and tonumber(stored) ~= tonumber(ARGV[4]) then
  return {-1, tonumber(stored)}
end
local pruned = prune(now)
local n = tonumber(ARGV[2])
local held = tonumber(redis.call('hget', KEYS[3], ARGV[1]) or '0')
if held < n then
  if pruned then wake(ARGV[3]) end
  return {0, held}
end
if held == n then
  redis.call('hdel', KEYS[3], ARGV[1])
  redis.call('zrem', KEYS[2], ARGV[1])
else
  redis.call('hincrby', KEYS[3], ARGV[1], -n)
end
wake(ARGV[3])
touch(now)
return {1, held - n}
