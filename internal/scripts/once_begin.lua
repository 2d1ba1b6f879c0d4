-- uses: lib
-- Start a run of a Once, unless it is done or running.
--
-- KEYS[1] state hash: done ("1" once f succeeded), val (its result), tok
-- KEYS[2] run key "<owner> <token> <call>", alive while the runner's lease
-- lasts; KEYS[3] undone zset: call -> expiry, the Do calls that gave up
-- (once_undo.lua): a begin of one of them that arrives late does nothing
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] call id (one per Do call)
-- Reply: {2, val} done; {1, token} this owner runs f now; {0, pttl} a run
-- is in progress, by any owner: a call is only "inside its own f" when it
-- comes through f's context, which the Go side detects per call.
if KEYS[3] and redis.call('zscore', KEYS[3], ARGV[3]) then
  return {0, 1} -- this call gave up and was undone: do nothing
end
if redis.call('hget', KEYS[1], 'done') then
  return {2, redis.call('hget', KEYS[1], 'val') or ''}
end
if redis.call('exists', KEYS[2]) == 1 then
  return {0, redis.call('pttl', KEYS[2])}
end
local _, us = server_now()
local last = tonumber(redis.call('hget', KEYS[1], 'tok') or '0')
local tok = next_token(last, us)
local s = fmt(tok)
redis.call('hset', KEYS[1], 'tok', s)
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. s .. ' ' .. ARGV[3], 'px', ARGV[2])
return {1, tok}
