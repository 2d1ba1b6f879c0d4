-- Release one hold of the fair mutex and wake the head of the queue only.
--
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] queue places zset
-- ARGV[1] owner, ARGV[2] token of the hold or "0" when unknown,
-- ARGV[3] free-marker lifetime in ms, ARGV[4] waiter channel prefix
-- Reply: 1 released, 2 count decremented (still held), 0 not held by owner.
local v = redis.call('get', KEYS[1])
if not v then
  return 0
end
local o, t, c = string.match(v, '^(%S+) (%d+) (%d+)$')
if o == '-' and t == ARGV[2] then
  -- Our own earlier release whose reply was lost: retrying is a no-op.
  return 1
end
if o ~= ARGV[1] or (ARGV[2] ~= '0' and t ~= ARGV[2]) then
  return 0
end
c = tonumber(c)
if c > 1 then
  redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (c - 1), 'keepttl')
  return 2
end
redis.call('set', KEYS[1], '- ' .. t .. ' 0', 'px', ARGV[3])
local now = server_now()
local head = prune_queue(KEYS[2], KEYS[3], now)
if head then
  redis.call('publish', ARGV[4] .. head, t)
end
return 1
