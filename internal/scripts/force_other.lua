-- The operator's "dsync unlock --force" for a Once and a WaitGroup.
--
-- ARGV[1] "once": KEYS[1] run key, KEYS[2] wakeup channel: end the running
-- run whoever runs it (its runner finds its run gone at its next renewal,
-- and its result, if any, is not recorded), and wake the waiters, one of
-- which runs f next. Reply: the runner's owner, or none.
-- ARGV[1] "wg": KEYS[1] counter, KEYS[2] wakeup channel, KEYS[3]
-- generation: reset the counter to zero, so every Wait returns. Reply: the
-- counter it had, or none.
local v = redis.call('get', KEYS[1])
if not v then
  return {}
end
if ARGV[1] == 'once' then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], 'fail')
  return {string.match(v, '^(%S+)') or v}
end
redis.call('del', KEYS[1], KEYS[3])
redis.call('publish', KEYS[2], '0')
return {v}
