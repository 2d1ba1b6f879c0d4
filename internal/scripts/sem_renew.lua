-- uses: lib sem_common
-- Extend the lease of one acquisition, if it is still held (sem_renew,
-- sem_common.lua).
--
-- ARGV[1] acquisition "<owner> <token> <waiter> <permits>", ARGV[2] lease
-- ms, ARGV[3] channel prefix
-- Reply: 1 renewed, 0 the acquisition is gone (released, or its lease
-- lapsed).
local now, now_us = server_now()
return sem_renew(now, now_us, ARGV[1], tonumber(ARGV[2]), ARGV[3])
