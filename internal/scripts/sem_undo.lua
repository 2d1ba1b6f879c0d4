-- uses: lib sem_common
-- Undo an Acquire call that gave up (its context ended, or its reply was
-- lost): take its waiter out of the queue, give back the permits it was
-- granted, if any, and mark the waiter undone for one lease, so that an
-- acquire of this call still on its way (rueidis may send it on another
-- connection) does nothing when it arrives. Exact: it touches only this
-- call's acquisition, never the owner's others. Repeating it is harmless.
--
-- ARGV[1] waiter id, ARGV[2] channel prefix, ARGV[3] how long to remember
-- the waiter as undone, ms
-- Reply: 1 permits given back, 0 none were granted.
local now, now_us = server_now()
local w = ARGV[1]
drop_waiter(w)
read_meta()
local mark = now + tonumber(ARGV[3])
if not meta_undone or meta_undone < mark then
  -- An acquire looks for its mark until then (sem_acquire.lua). This may
  -- create the meta hash: touch gives it the keys' lifetime.
  meta_undone = mark
  redis.call('hset', KEYS[1], 'undone', fmt(mark))
end
redis.call('zremrangebyscore', KEYS[7], '-inf', now) -- marks that expired
redis.call('zadd', KEYS[7], mark, w)
local back = 0
local suffix = ' ' .. w
for _, m in ipairs(redis.call('hkeys', KEYS[3])) do
  if string.sub(m, -#suffix) == suffix then
    redis.call('hdel', KEYS[3], m)
    redis.call('zrem', KEYS[2], m)
    back = 1
  end
end
prune(now, true)
prune_places(now)
local upto = grant(ARGV[2], now, now_us)
touch(now, {2, 3, 7}, upto) -- the undone set may be new; a grant may have made the holders
return back
