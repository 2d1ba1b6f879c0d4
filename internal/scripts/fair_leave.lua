-- Take a waiter out of a fair queue at once, because its wait ended, so the
-- waiters behind it do not wait for its place to lapse.
--
-- KEYS[1] queue list, KEYS[2] queue places zset
-- ARGV[1] waiter, ARGV[2] waiter channel prefix, ARGV[3] a channel to
-- publish on when the queue becomes empty, or ""
-- Reply: 1 removed, 0 it was not queued.
local now = server_now()
local first = redis.call('lindex', KEYS[1], 0)
local n = redis.call('lrem', KEYS[1], 0, ARGV[1])
local z = redis.call('zrem', KEYS[2], ARGV[1])
if n == 0 and z == 0 then
  return 0
end
local head = prune_queue(KEYS[1], KEYS[2], now)
if head and first == ARGV[1] then
  -- The new head may find the lock free: let it look.
  redis.call('publish', ARGV[2] .. head, 'turn')
elseif not head and ARGV[3] ~= '' then
  redis.call('publish', ARGV[3], 'empty')
end
return 1
