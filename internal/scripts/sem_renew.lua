-- uses: lib sem_common
-- Extend the lease of one acquisition, if it is still held: each
-- acquisition has its own lease (sem_common.lua).
--
-- ARGV[1] acquisition "<owner> <token> <waiter>", ARGV[2] lease ms,
-- ARGV[3] channel prefix
-- Reply: 1 renewed, 0 the acquisition is gone (released, or its lease
-- lapsed).
local now, now_us = server_now()
local exp = redis.call('zscore', KEYS[2], ARGV[1])
if not exp or tonumber(exp) <= now then
  if prune(now) then
    local upto, made = grant(ARGV[3], now, now_us)
    touch(now, made, upto)
  end
  return 0
end
local expiry = math.max(tonumber(exp), now + tonumber(ARGV[2]))
redis.call('zadd', KEYS[2], expiry, ARGV[1])
touch(now, {}, expiry)
return 1
