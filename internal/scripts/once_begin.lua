-- Start a run of a Once, unless it is done or running.
--
-- KEYS[1] state hash: done ("1" once f succeeded), val (its result), tok
-- KEYS[2] run key "<owner> <token>", alive while the runner's lease lasts
-- ARGV[1] owner, ARGV[2] lease ms
-- Reply: {2, val} done; {1, token} this owner runs f now; {0, pttl} a run
-- is in progress, by any owner: a call is only "inside its own f" when it
-- comes through f's context, which the Go side detects per call.
if redis.call('hget', KEYS[1], 'done') then
  return {2, redis.call('hget', KEYS[1], 'val') or ''}
end
if redis.call('exists', KEYS[2]) == 1 then
  return {0, redis.call('pttl', KEYS[2])}
end
local t = redis.call('time')
local last = tonumber(redis.call('hget', KEYS[1], 'tok') or '0')
local tok = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
local s = string.format('%.0f', tok)
redis.call('hset', KEYS[1], 'tok', s)
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. s, 'px', ARGV[2])
return {1, tok}
