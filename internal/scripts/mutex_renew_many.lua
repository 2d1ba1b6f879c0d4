-- Extend the leases of many holds in one call, each only if it is still
-- that owner's hold: the renewal loop's batch form of mutex_renew.lua. In a
-- cluster the caller batches only keys of one slot.
--
-- KEYS[i] lock key of hold i
-- ARGV[1] lease in ms, ARGV[i+1] "<owner> <token> " of hold i
-- Reply: an array, 1 renewed or 0 gone, per hold.
local res = {}
for i = 1, #KEYS do
  local v = redis.call('get', KEYS[i])
  local p = ARGV[i + 1]
  if v and string.sub(v, 1, #p) == p then
    redis.call('pexpire', KEYS[i], ARGV[1])
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
