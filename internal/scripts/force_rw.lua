-- uses: lib fair_lib rw_lib
-- Release every hold of an rw mutex, write and read, whoever holds them:
-- the operator's "dsync unlock --force". The last token stays, so fencing
-- tokens keep growing; each holder finds its hold gone at its next renewal.
-- The lock is then passed on as after a write release: the waiting readers
-- are granted read holds, else the first queued writer the write lock.
--
-- KEYS[1..6] as in rw_lib.lua; ARGV[1] unused, ARGV[2] waiter channel
-- prefix
-- Reply: the owners whose holds were released (none when nothing was held).
local now, us = server_now()
local released = {}
rw_load()
if rw_w then
  released[#released + 1] = rw_w
  rw_end_writer()
end
for _, o in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
  released[#released + 1] = o
  redis.call('hdel', KEYS[1], 'r:' .. o)
end
redis.call('del', KEYS[2])
if #released == 0 then
  return released
end
rw_hand_on(now, us, ARGV[2], true)
rw_drop_writer()
return released
