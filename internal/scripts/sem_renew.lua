-- Extend the lease of one acquisition, if it is still held: each
-- acquisition has its own lease (sem_common.lua).
--
-- ARGV[1] acquisition "<owner> <token> <waiter>", ARGV[2] lease ms,
-- ARGV[3] channel prefix
-- Reply: 1 renewed, 0 the acquisition is gone (released, or its lease
-- lapsed).
local now = now_ms()
local exp = redis.call('zscore', KEYS[2], ARGV[1])
if not exp or tonumber(exp) <= now then
  if prune(now) then wake(ARGV[3]) end
  return 0
end
local expiry = math.max(tonumber(exp), now + tonumber(ARGV[2]))
redis.call('zadd', KEYS[2], expiry, ARGV[1])
touch(now, false, expiry)
return 1
