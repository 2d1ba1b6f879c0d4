-- uses: lib fair_lib rw_lib
-- Release one hold of the read or the write lock of an rw mutex; the last
-- count passes the lock on (rw_hand_on in rw_lib.lua): a write release
-- grants the readers that waited, else the first queued writer; the last
-- read release grants the first queued writer, and one that leaves a
-- single reader waiting to upgrade grants it the write lock.
--
-- KEYS[1..6] as in rw_lib.lua
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] token of the hold or
-- "0" when unknown, ARGV[4] unused, ARGV[5] waiter channel prefix
-- Reply: 1 released, 2 count decremented (still held), 0 not held by owner.
local now, us = server_now()
local owner = ARGV[2]
if ARGV[1] == 'read' then
  rw_load(owner)
  local r = rw_r
  if not r then
    return 0
  end
  if tonumber(redis.call('zscore', KEYS[2], owner) or '0') <= now then
    rw_hand_on(now, us, ARGV[5], false) -- drops the lapsed hold, passes the lock on
    return 0
  end
  local c, t, g = string.match(r, '^(%d+) (%d+) ?(%S*)$')
  if ARGV[3] ~= '0' and t ~= ARGV[3] then
    return 0
  end
  if tonumber(c) > 1 then
    redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) - 1) .. ' ' .. t .. (g ~= '' and (' ' .. g) or ''))
    return 2
  end
  redis.call('hdel', KEYS[1], 'r:' .. owner)
  redis.call('zrem', KEYS[2], owner)
  rw_hand_on(now, us, ARGV[5], false)
  return 1
end
local w, wt, wc = rw_writer(now) -- a lapsed writer is dropped
if not w then
  rw_hand_on(now, us, ARGV[5], false) -- not a write release: readers do not go first
end
if w ~= owner or (ARGV[3] ~= '0' and wt ~= ARGV[3]) then
  return 0
end
if tonumber(wc) > 1 then
  redis.call('hincrby', KEYS[1], 'wc', -1)
  return 2
end
rw_end_writer()
rw_hand_on(now, us, ARGV[5], true)
rw_drop_writer()
return 1
