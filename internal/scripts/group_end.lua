-- uses: lib group_lib
-- End a run of one key of a Group: keep its result (or its error) for the
-- callers waiting for it, or, after a failure (panic, the leader's own
-- context ended), let a waiter run fn. Either way the waiters are woken.
--
-- ARGV[1] "<owner> <token> <call>", ARGV[2] "ok", "err", "fail" or "gone"
-- (a failure whose process is closing: its call does not wait on), ARGV[3]
-- the result or the error message, ARGV[4] the key, ARGV[5] WithResultTTL
-- ms, ARGV[6] lease ms (how long a waiter may take to look)
-- Reply: {1} recorded; {0} the run had lost its marker (lease lapsed, or
-- Forget): nothing changed.
if redis.call('get', KEYS[2]) ~= ARGV[1] then
  return {0}
end
redis.call('del', KEYS[2])
if ARGV[2] == 'fail' or ARGV[2] == 'gone' then
  -- The runner's process waits on (its other callers take over; its
  -- leave, if it has none, takes the place back), so a run that another
  -- process starts now keeps its result for them; unless it is closing.
  if ARGV[2] == 'fail' then
    local lease = tonumber(ARGV[6])
    redis.call('zadd', KEYS[5], now + lease, string.match(ARGV[1], ' (%S+)$'))
    keep(KEYS[5], lease)
  end
  redis.call('publish', KEYS[4], 'fail')
  return {1}
end
local ttl = tonumber(ARGV[5])
local n = live_waiters()
if n == 0 and ttl <= 0 then
  drop(ARGV[4])
  return {1}
end
redis.call('hset', KEYS[1], 'done', '1', 'val', ARGV[3], 'err', ARGV[2] == 'err' and '1' or '0',
  'until', string.format('%.0f', now + ttl))
-- Live waiters look within a lease; the result outlives it only by its TTL.
local ms = ttl
if n > 0 then
  ms = math.max(ttl, tonumber(ARGV[6]))
end
redis.call('pexpire', KEYS[1], ms)
list(ARGV[4], ms)
redis.call('publish', KEYS[4], 'done')
return {1}
