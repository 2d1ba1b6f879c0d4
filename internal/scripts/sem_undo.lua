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
local left = redis.call('lrem', KEYS[3], '0', w)
redis.call('hdel', KEYS[4], w)
local stored = read_meta()
local mark = now + tonumber(ARGV[3])
if not meta_undone or meta_undone < mark then
  -- An acquire looks for its mark until then (sem_acquire.lua). This may
  -- create the meta hash: touch gives it the keys' lifetime.
  meta_undone = mark
  redis.call('hset', KEYS[1], 'undone', fmt(mark))
end
redis.call('zremrangebyscore', KEYS[5], '-inf', fmt(now)) -- marks that expired
redis.call('zadd', KEYS[5], fmt(mark), w)
local live, inuse, dead = holders(now)
local back, gone = 0, {'zrem', KEYS[2]}
for _, h in ipairs(live) do
  if string.match(h[1], '^%S+ %d+ (%S+) ') == w then
    gone[#gone + 1] = h[1]
    inuse = inuse - h[3]
    back = 1
  end
end
if back == 1 then
  redis.call(unpack(gone))
end
local upto, made = 0, {}
if stored and (left > 0 or back == 1 or dead) then
  -- Permits came back, or a waiter ahead of others left: serve the queue.
  local free = tonumber(stored) - inuse
  if free > 0 then
    local _
    _, upto, _, made = grant(ARGV[2], now, now_us, free, #live > #gone - 2)
  end
end
made[#made + 1] = KEYS[5] -- the undone set may be new
touch(now, made, upto)
return back
