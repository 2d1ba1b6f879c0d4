-- uses: lib fair_lib rw_lib
-- Extend the leases of many rw mutex holds in one call (rw_renew,
-- rw_lib.lua, for each): the renewal loop's batch form of rw_renew.lua. In
-- a cluster the caller batches only keys of one slot. rw_lib's functions
-- read the lock's keys from KEYS[1..6]: each hold's keys are put there in
-- turn, and what rw_load read of the last hold is forgotten.
--
-- KEYS[6i-5..6i] the keys of hold i, in rw_lib.lua's order
-- ARGV[1] lease in ms; ARGV[3i-1] "read" or "write", ARGV[3i] owner,
-- ARGV[3i+1] token of hold i
-- Reply: an array of the numbers (from 1) of the holds gone; every other
-- hold was renewed.
local now, lease = server_now(), tonumber(ARGV[1])
local all, gone = {}, {}
for i = 1, #KEYS do
  all[i] = KEYS[i]
end
for i = 1, #all / 6 do
  for k = 1, 6 do
    KEYS[k] = all[6 * (i - 1) + k]
  end
  rw_loaded = nil
  local a = 3 * i - 1
  if rw_renew(now, ARGV[a], ARGV[a + 1], ARGV[a + 2], lease) == 0 then
    gone[#gone + 1] = i
  end
end
return gone
