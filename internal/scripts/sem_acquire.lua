-- Acquire n permits for an owner, or queue (or refresh) the waiter's place.
--
-- ARGV[1] owner, ARGV[2] waiter id, ARGV[3] n, ARGV[4] size,
-- ARGV[5] hold lease ms, ARGV[6] "try" or "wait", ARGV[7] channel prefix,
-- ARGV[8] queue place lease ms
-- Reply: {1, token} acquired (the acquisition is "<owner> <token>
-- <waiter>"); {0, ms} not acquired (queued unless "try"), ms is when to look
-- again at the latest (a holder's lease may lapse then); {-1, size} the
-- semaphore exists with another size.
local now, now_us = now_ms()
if redis.call('zscore', KEYS[7], ARGV[2]) then
  return {0, 1} -- the caller gave up and undid this attempt: do nothing
end
local size = tonumber(ARGV[4])
local stored = redis.call('hget', KEYS[1], 'size')
if stored and tonumber(stored) ~= size then
  return {-1, tonumber(stored)}
end
if not stored then
  redis.call('hset', KEYS[1], 'size', ARGV[4])
end
local pruned = prune(now)
local n = tonumber(ARGV[3])
local free = size - used()
local ahead
local ticket = redis.call('zscore', KEYS[4], ARGV[2])
if ticket then
  ahead = redis.call('zrangebyscore', KEYS[4], '-inf', '(' .. ticket, 'limit', 0, math.max(free, 0) + 1)
else
  ahead = redis.call('zrange', KEYS[4], 0, math.max(free, 0))
end
if free >= n and fits(ahead, free, n) then
  if ticket then
    redis.call('zrem', KEYS[4], ARGV[2])
    redis.call('hdel', KEYS[5], ARGV[2])
    redis.call('zrem', KEYS[6], ARGV[2])
  end
  -- Fencing token: one more than the last, never below the server clock in
  -- microseconds, as for the mutex.
  local last = tonumber(redis.call('hget', KEYS[1], 'tok') or '0')
  local tok = math.max(last + 1, now_us)
  local stok = string.format('%.0f', tok)
  redis.call('hset', KEYS[1], 'tok', stok)
  local member = ARGV[1] .. ' ' .. stok .. ' ' .. ARGV[2]
  local existed = redis.call('exists', KEYS[2], KEYS[3]) == 2
  redis.call('hset', KEYS[3], member, n)
  local expiry = now + tonumber(ARGV[5])
  redis.call('zadd', KEYS[2], expiry, member)
  if pruned then wake(ARGV[7]) end
  touch(now, not (stored and existed), expiry)
  return {1, tok}
end
local created, upto = not stored, now
if ARGV[6] == 'wait' then
  if not ticket then
    local seq = redis.call('hincrby', KEYS[1], 'seq', 1)
    redis.call('zadd', KEYS[4], seq, ARGV[2])
    redis.call('hset', KEYS[5], ARGV[2], ARGV[3])
    created = true -- the queue's keys, if it was empty
  end
  upto = now + tonumber(ARGV[8])
  redis.call('zadd', KEYS[6], upto, ARGV[2])
end
if pruned then wake(ARGV[7]) end
touch(now, created, upto)
-- The earliest lease to lapse may free permits without anyone publishing.
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
local hint = tonumber(ARGV[8])
if first[2] then
  hint = math.max(tonumber(first[2]) - now + 1, 1)
end
return {0, hint}
