-- Extend the leases of many runs in one call, each only if the run is
-- still its runner's: the renewal loop's batch form of once_renew.lua. In a
-- cluster the caller batches only keys of one slot.
--
-- KEYS[i] run key of run i
-- ARGV[1] lease in ms, ARGV[i+1] "<owner> <token> <call>" of run i
-- Reply: an array of the numbers (from 1) of the runs no longer ours;
-- every other run was renewed.
local vs, gone = redis.call('mget', unpack(KEYS)), {}
for i = 1, #KEYS do
  if vs[i] == ARGV[i + 1] then
    redis.call('pexpire', KEYS[i], ARGV[1])
  else
    gone[#gone + 1] = i
  end
end
return gone
