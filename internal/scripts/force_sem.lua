-- uses: lib sem_common
-- Release every permit of a semaphore, whoever holds them: the operator's
-- "dsync unlock --force". Each holder finds its acquisition gone at its next
-- renewal; the waiters that now fit are woken, in queue order.
--
-- KEYS as in sem_common.lua; ARGV[1] waiter channel prefix
-- Reply: the owners whose permits were released, once per acquisition.
local now, now_us = server_now()
local released = {}
local all = redis.call('hgetall', KEYS[3])
for i = 1, #all, 2 do
  released[#released + 1] = string.match(all[i], '^(%S+)') or all[i]
end
redis.call('del', KEYS[2], KEYS[3])
if #released > 0 then
  local upto = grant(ARGV[1], now, now_us)
  touch(now, {}, upto, true)
end
return released
