-- uses: lib sem_common
-- Release every permit of a semaphore, whoever holds them: the operator's
-- "dsync unlock --force". Each holder finds its acquisition gone at its next
-- renewal; the waiters that now fit are granted, in queue order.
--
-- KEYS as in sem_common.lua; ARGV[1] waiter channel prefix
-- Reply: the owners whose permits were released, once per acquisition.
local now, now_us = server_now()
local released = {}
for _, m in ipairs(redis.call('zrange', KEYS[2], '0', '-1')) do
  released[#released + 1] = string.match(m, '^(%S+)') or m
end
if #released > 0 then
  redis.call('del', KEYS[2])
  local stored = read_meta()
  if stored then
    local _, upto = grant(ARGV[1], now, now_us, tonumber(stored), false)
    touch(now, {}, upto, true)
  end
end
return released
