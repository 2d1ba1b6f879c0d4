-- Take a waiter of an rw mutex out at once, because its wait ended, so that
-- nobody waits for its place to lapse.
--
-- A writer leaves the writer queue: if it was first, the next writer may
-- find the lock free; if the queue is now empty, the readers it held back
-- may go. A reader leaves the waiting or the admitted readers: if it was
-- the last admitted one, the first queued writer may go.
--
-- KEYS[1..6] as in rw_lib.lua
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] writer channel prefix,
-- ARGV[4] reader channel
-- Reply: 1 removed, 0 it was not waiting.
local now = server_now()
local owner = ARGV[2]
if ARGV[1] == 'read' then
  redis.call('zrem', KEYS[5], owner)
  if redis.call('zrem', KEYS[6], owner) == 0 then
    return 0
  end
  rw_prune(now)
  if redis.call('zcard', KEYS[6]) == 0 and not redis.call('hget', KEYS[1], 'w') and redis.call('zcard', KEYS[2]) == 0 then
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
      redis.call('publish', ARGV[3] .. head, 'turn')
    end
  end
  return 1
end
local first = redis.call('lindex', KEYS[3], 0)
local n = redis.call('lrem', KEYS[3], 0, owner)
local z = redis.call('zrem', KEYS[4], owner)
if n == 0 and z == 0 then
  return 0
end
local head = prune_queue(KEYS[3], KEYS[4], now)
if head and first == owner then
  redis.call('publish', ARGV[3] .. head, 'turn')
elseif not head then
  redis.call('publish', ARGV[4], 'empty')
end
return 1
