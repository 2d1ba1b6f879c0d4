-- Release one hold of the read or the write lock of an rw mutex. A write
-- release admits the readers that waited (rw_lib.lua) and wakes them, or,
-- when none waited, wakes the first queued writer; the last read release
-- wakes the first queued writer, and a release that leaves one reader
-- wakes it if it waits to upgrade.
--
-- KEYS[1..6] as in rw_lib.lua
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] token of the hold or
-- "0" when unknown, ARGV[4] reader channel, ARGV[5] writer channel prefix
-- Reply: 1 released, 2 count decremented (still held), 0 not held by owner.
local now = server_now()
rw_prune(now)
local owner = ARGV[2]
if ARGV[1] == 'read' then
  local r = redis.call('hget', KEYS[1], 'r:' .. owner)
  if not r then
    return 0
  end
  local c, t = string.match(r, '^(%d+) (%d+)$')
  if ARGV[3] ~= '0' and t ~= ARGV[3] then
    return 0
  end
  if tonumber(c) > 1 then
    redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) - 1) .. ' ' .. t)
    return 2
  end
  redis.call('hdel', KEYS[1], 'r:' .. owner)
  redis.call('zrem', KEYS[2], owner)
  local m = rw_mode()
  rw_touch(now)
  if not m then
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
      redis.call('publish', ARGV[5] .. head, 'turn')
    end
  else
    rw_wake_upgrader(ARGV[5])
  end
  return 1
end
local w = redis.call('hmget', KEYS[1], 'w', 'wt', 'wc')
if w[1] ~= owner or (ARGV[3] ~= '0' and w[2] ~= ARGV[3]) then
  return 0
end
if tonumber(w[3]) > 1 then
  redis.call('hincrby', KEYS[1], 'wc', -1)
  return 2
end
redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp')
local m = rw_mode()
rw_touch(now)
if rw_admit(now) then
  -- The readers that waited go before any later writer.
  redis.call('publish', ARGV[4], 'w')
elseif not m then
  local head = redis.call('lindex', KEYS[3], 0)
  if head then
    redis.call('publish', ARGV[5] .. head, 'turn')
  end
end
return 1
