-- uses: lib
-- Undo a Do call that gave up before it knew whether its begin ran (its
-- context ended or its reply was lost): remember the call as undone for a
-- while, so that a begin still on its way (rueidis may send it on another
-- connection) does nothing when it arrives, and end the run it started, if
-- any, waking the waiters. Exact: it touches only this call's run. It can
-- be repeated.
--
-- KEYS[1] state hash, KEYS[2] run key, KEYS[3] undone zset, KEYS[4] channel
-- ARGV[1] call id, ARGV[2] how long to remember the call as undone, ms
-- Reply: 1 a run of this call was ended, 0 there was none.
local now = server_now()
redis.call('zremrangebyscore', KEYS[3], '-inf', now)
redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('pttl', KEYS[3]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[3], ARGV[2])
end
local v = redis.call('get', KEYS[2])
if v and string.match(v, ' (%S+)$') == ARGV[1] then
  redis.call('del', KEYS[2])
  redis.call('publish', KEYS[4], 'fail')
  return 1
end
return 0
