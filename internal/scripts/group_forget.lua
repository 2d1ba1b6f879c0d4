-- Forget one key of a Group: drop its record, result and running marker,
-- so the next call runs fn again. A run in progress goes on, but its end
-- finds its marker gone and records nothing (group_end.lua); the waiters
-- are woken to look again.
--
-- ARGV[1] the key. Reply: 1 there was a record, 0 there was none.
local found = redis.call('exists', KEYS[1], KEYS[2], KEYS[5])
redis.call('del', KEYS[1], KEYS[2], KEYS[5])
redis.call('zrem', KEYS[6], ARGV[1])
if found > 0 then
  redis.call('publish', KEYS[4], 'fail')
end
return found > 0 and 1 or 0
