-- Extend the lease of an owner's permits, if it still holds any.
--
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] channel prefix
-- Reply: 1 renewed, 0 the owner holds nothing (released, or its lease lapsed).
local now = now_ms()
local exp = redis.call('zscore', KEYS[2], ARGV[1])
if not exp or tonumber(exp) <= now then
  if prune(now) then wake(ARGV[3]) end
  return 0
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
touch(now)
return 1
