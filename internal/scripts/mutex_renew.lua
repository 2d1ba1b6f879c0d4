-- Extend the lease of a hold, only if it is still this owner's hold.
--
-- KEYS[1] lock key
-- ARGV[1] "<owner> <token> " (the value's prefix), ARGV[2] lease in ms
-- Reply: 1 renewed, 0 the hold is gone.
local v = redis.call('get', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
