-- Acquire, re-enter or queue for the fair mutex.
--
-- The lock is a string "<owner> <token> <count>" as for the mutex, and
-- after a release a free marker "- <token> 0". The lock goes only to the head
-- of the queue (or to anyone when the queue is empty).
--
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] queue places zset, KEYS[4]
-- optional attempt marker (as in mutex_acquire.lua)
-- ARGV[1] owner, ARGV[2] lease in ms, ARGV[3] queue-place lease in ms,
-- ARGV[4] "1" for a try (never queues), ARGV[5] waiter channel prefix
-- Reply: {1, token} acquired; {2, token} re-entered (the owner held it
-- through another Client); {0, ms} not granted: call again within ms.
if undone(KEYS[4]) then
  return {0, 0} -- the undo of this attempt ran first: do nothing
end
local now, us = server_now()
local head = prune_queue(KEYS[2], KEYS[3], now)
local owner = ARGV[1]
local v = redis.call('get', KEYS[1])
local last, held = 0, false
if v then
  local o, t, c = string.match(v, '^(%S+) (%d+) (%d+)$')
  if o == owner then
    redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (tonumber(c) + 1), 'px', ARGV[2])
    return granted(KEYS[4], ARGV[2], {2, tonumber(t)})
  end
  if o == '-' then
    last = tonumber(t)
  else
    held = true
  end
end
if not held and (not head or head == owner) then
  if head then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
  end
  -- Fencing token as for the mutex: past the last one and the clock in µs.
  local tok = math.max(last + 1, us)
  redis.call('set', KEYS[1], owner .. ' ' .. fmt(tok) .. ' 1', 'px', ARGV[2])
  return granted(KEYS[4], ARGV[2], {1, tok})
end
local wait
if held then
  wait = math.max(redis.call('pttl', KEYS[1]), 1)
else
  -- Free, but another waiter is first. It may have missed its wakeup (a
  -- lost message, a reconnect), so tell it again.
  redis.call('publish', ARGV[5] .. head, 'turn')
  wait = place_left(KEYS[3], head, now)
end
if ARGV[4] ~= '1' then
  enqueue(KEYS[2], KEYS[3], owner, now, tonumber(ARGV[3]))
end
return {0, wait}
