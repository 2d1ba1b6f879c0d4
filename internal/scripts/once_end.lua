-- End a run of a Once: record success durably, or give the next caller its
-- turn after a failure. Either way the waiters are woken.
--
-- KEYS[1] state hash, KEYS[2] run key, KEYS[3] wakeup channel
-- ARGV[1] "<owner> <token> <call>", ARGV[2] "ok" or "fail", ARGV[3] result
-- Reply: {1} recorded (also for a retry of this run's end that did);
-- {2, val} already done by another run, which began after this run's lease
-- lapsed (its value); {0} this run had lost its lease and another run holds
-- it: nothing changed.
-- mine says whether no run began after this one (the last token issued is
-- its own); asked only off the common case, the run's own marker found.
local function mine()
  return string.match(ARGV[1], '^%S+ (%d+) ') == redis.call('hget', KEYS[1], 'tok')
end
if redis.call('hget', KEYS[1], 'done') then
  if redis.call('get', KEYS[2]) == ARGV[1] then
    redis.call('del', KEYS[2])
  end
  if mine() then
    -- No run began after this one (the last token is its own), so the
    -- run that succeeded is this one: an end retried after a lost reply.
    return {1}
  end
  return {2, redis.call('hget', KEYS[1], 'val') or ''}
end
local v = redis.call('get', KEYS[2])
if v ~= ARGV[1] then
  if ARGV[2] == 'ok' and not v and mine() then
    -- Our lease lapsed but nobody took over (no run began since ours: the
    -- last token is still ours), so the result still stands alone. A run
    -- that took over and ended without a result leaves no run key either:
    -- then ours must not count.
    redis.call('hset', KEYS[1], 'done', '1', 'val', ARGV[3])
    redis.call('publish', KEYS[3], 'done')
    return {1}
  end
  return {0}
end
redis.call('del', KEYS[2])
if ARGV[2] == 'ok' then
  redis.call('hset', KEYS[1], 'done', '1', 'val', ARGV[3])
  redis.call('persist', KEYS[1])
end
redis.call('publish', KEYS[3], ARGV[2])
return {1}
