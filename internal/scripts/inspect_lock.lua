-- Read a mutex or fair mutex in one atomic step, for Client.Inspect.
--
-- KEYS[1] lock key ("<owner> <token> <count>", or "- <token> 0" when free),
-- KEYS[2] queue list and KEYS[3] queue places zset (fair mutex only)
-- ARGV[1] the most waiters to report
-- Reply: {value or "", pttl, waiter, ms left of its place, waiter, ...}:
-- only waiters whose place has not lapsed, in queue order.
local out = {redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1])}
if KEYS[2] then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, w in ipairs(redis.call('lrange', KEYS[2], 0, tonumber(ARGV[1]) - 1)) do
    local s = redis.call('zscore', KEYS[3], w)
    if s and tonumber(s) > now then
      out[#out + 1] = w
      out[#out + 1] = tonumber(s) - now
    end
  end
end
return out
