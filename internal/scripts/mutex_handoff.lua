-- Hand the mutex from one owner to another of the same Client in one step,
-- with a fresh fencing token, instead of a release and an acquire.
--
-- KEYS[1] lock key
-- ARGV[1] from owner, ARGV[2] from token, ARGV[3] to owner,
-- ARGV[4] lease in ms for the new holder
-- Reply: {1, token} handed over; {0} the from owner no longer holds it alone.
local v = redis.call('get', KEYS[1])
if not v then
  return {0}
end
local o, t, c = string.match(v, '^(%S+) (%d+) (%d+)$')
if o == ARGV[3] and c == '1' then
  -- A retry of a handoff that was applied.
  return {1, tonumber(t)}
end
if o ~= ARGV[1] or t ~= ARGV[2] or c ~= '1' then
  return {0}
end
local now = redis.call('time')
local tok = math.max(tonumber(t) + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
redis.call('set', KEYS[1], ARGV[3] .. ' ' .. string.format('%.0f', tok) .. ' 1', 'px', ARGV[4])
return {1, tok}
