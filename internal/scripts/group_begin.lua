-- uses: lib group_lib
-- Start a run of one key of a Group, wait for the run in progress, or take
-- the result of the last one.
--
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] call id (one per process and
-- key), ARGV[4] the key (index member), ARGV[5] WithResultTTL ms
-- Reply: {2, val} the result; {3, message} the leader's error; {1, token}
-- this call runs fn now; {0, pttl} a run is in progress: the call now
-- waits (its place in the waiters renewed for a lease).
if redis.call('zscore', KEYS[3], ARGV[3]) then
  return {0, 1} -- this call gave up and was undone: do nothing
end
local lease = tonumber(ARGV[2])
if redis.call('hget', KEYS[1], 'done') then
  redis.call('zrem', KEYS[5], ARGV[3])
  local code = redis.call('hget', KEYS[1], 'err') == '1' and 3 or 2
  local val = redis.call('hget', KEYS[1], 'val') or ''
  settle(ARGV[4])
  return {code, val}
end
if redis.call('exists', KEYS[2]) == 1 then
  redis.call('zadd', KEYS[5], now + lease, ARGV[3])
  keep(KEYS[5], lease)
  list(ARGV[4], lease)
  return {0, redis.call('pttl', KEYS[2])}
end
redis.call('zrem', KEYS[5], ARGV[3])
local last = tonumber(redis.call('hget', KEYS[1], 'tok') or '0')
local tok = next_token(last, now_us)
local s = string.format('%.0f', tok)
redis.call('hset', KEYS[1], 'tok', s)
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. s .. ' ' .. ARGV[3], 'px', lease)
-- The token outlives a lease only while someone waits (a later run mints
-- from the clock anyway).
keep(KEYS[1], lease)
list(ARGV[4], lease)
return {1, tok}
