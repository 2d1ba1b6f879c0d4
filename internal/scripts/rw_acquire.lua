-- Acquire or re-enter the read or the write lock of an rw mutex.
--
-- Readers share; a writer excludes everyone. Writers queue in arrival order
-- and, once one waits, new readers wait too, so a stream of readers cannot
-- starve writers (Go's sync.RWMutex rule). An owner holding the write lock
-- may take the read lock (to downgrade), and an owner that is the only
-- reader may take the write lock.
--
-- KEYS[1] hash, KEYS[2] readers zset, KEYS[3] writer queue, KEYS[4] queue
-- places, KEYS[5] optional attempt marker (as in mutex_acquire.lua)
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] lease in ms,
-- ARGV[4] queue-place lease in ms, ARGV[5] "1" for a try, ARGV[6] writer
-- channel prefix
-- Reply: {1, token} acquired; {2, token} re-entered; {0, ms} not granted:
-- call again within ms.
if undone(KEYS[5]) then
  return {0, 0} -- the undo of this attempt ran first: do nothing
end
local now, us = server_now()
rw_prune(now)
local owner, lease = ARGV[2], tonumber(ARGV[3])
local w = redis.call('hget', KEYS[1], 'w')
if ARGV[1] == 'read' then
  local r = redis.call('hget', KEYS[1], 'r:' .. owner)
  if r then
    local c, t = string.match(r, '^(%d+) (%d+)$')
    redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) + 1) .. ' ' .. t)
    local s = tonumber(redis.call('zscore', KEYS[2], owner))
    redis.call('zadd', KEYS[2], math.max(s, now + lease), owner)
    rw_touch(now)
    return granted(KEYS[5], ARGV[3], {2, tonumber(t)})
  end
  local blocked
  if w then
    blocked = w ~= owner
  else
    blocked = redis.call('llen', KEYS[3]) > 0
  end
  if blocked then
    return {0, rw_wait(now)}
  end
  local tok = rw_token(us)
  redis.call('hset', KEYS[1], 'r:' .. owner, '1 ' .. fmt(tok))
  redis.call('zadd', KEYS[2], now + lease, owner)
  rw_mode()
  rw_touch(now)
  return granted(KEYS[5], ARGV[3], {1, tok})
end
if w == owner then
  redis.call('hincrby', KEYS[1], 'wc', 1)
  local e = math.max(tonumber(redis.call('hget', KEYS[1], 'wexp')), now + lease)
  redis.call('hset', KEYS[1], 'wexp', fmt(e))
  rw_touch(now)
  return granted(KEYS[5], ARGV[3], {2, tonumber(redis.call('hget', KEYS[1], 'wt'))})
end
local readers = redis.call('zcard', KEYS[2])
if redis.call('zscore', KEYS[2], owner) then
  readers = readers - 1
end
local head = redis.call('lindex', KEYS[3], 0)
if not w and readers == 0 and (not head or head == owner) then
  if head then
    redis.call('lpop', KEYS[3])
    redis.call('zrem', KEYS[4], owner)
  end
  local tok = rw_token(us)
  redis.call('hset', KEYS[1], 'w', owner, 'wt', fmt(tok), 'wc', 1, 'wexp', fmt(now + lease))
  rw_mode()
  rw_touch(now)
  return granted(KEYS[5], ARGV[3], {1, tok})
end
local wait = rw_wait(now)
if not w and readers == 0 then
  -- Free for writers, but another one is first: make sure it knows.
  redis.call('publish', ARGV[6] .. head, 'turn')
  wait = place_left(KEYS[4], head, now)
end
if ARGV[5] ~= '1' then
  enqueue(KEYS[3], KEYS[4], owner, now, tonumber(ARGV[4]))
end
return {0, wait}
