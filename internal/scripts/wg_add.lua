-- Add delta to a WaitGroup counter; wake the waiters when it reaches zero.
--
-- KEYS[1] counter, KEYS[2] wakeup channel; ARGV[1] delta
-- Reply: {1, counter} applied; {0, counter} the counter would go negative,
-- and is unchanged.
local v = tonumber(redis.call('get', KEYS[1]) or '0')
local nv = v + tonumber(ARGV[1])
if nv < 0 then
  return {0, v}
end
if nv == 0 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
else
  redis.call('set', KEYS[1], string.format('%.0f', nv))
end
return {1, nv}
