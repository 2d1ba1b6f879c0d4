-- Release every hold of an rw mutex, write and read, whoever holds them:
-- the operator's "dsync unlock --force". The last token stays, so fencing
-- tokens keep growing; each holder finds its hold gone at its next renewal.
-- The waiting readers are admitted and woken, else the first writer.
--
-- KEYS[1..6] as in rw_lib.lua; ARGV[1] reader channel, ARGV[2] writer
-- channel prefix
-- Reply: the owners whose holds were released (none when nothing was held).
local now = server_now()
local released = {}
local w = redis.call('hget', KEYS[1], 'w')
if w then
  released[#released + 1] = w
  redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp')
end
for _, o in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
  released[#released + 1] = o
  redis.call('hdel', KEYS[1], 'r:' .. o)
end
redis.call('del', KEYS[2])
if #released == 0 then
  return released
end
rw_mode()
rw_touch(now)
if rw_admit(now) then
  redis.call('publish', ARGV[1], 'w')
else
  local head = redis.call('lindex', KEYS[3], 0)
  if head then
    redis.call('publish', ARGV[2] .. head, 'turn')
  end
end
return released
