-- uses: lib sem_common
-- Extend the leases of many semaphore acquisitions in one call (sem_renew,
-- sem_common.lua, for each): the renewal loop's batch form of
-- sem_renew.lua. In a cluster the caller batches only keys of one slot.
-- sem_common's functions read the semaphore's keys from KEYS[1..5]: each
-- acquisition's keys are put there in turn, and what read_meta read of the
-- last one is forgotten.
--
-- KEYS[5i-4..5i] the keys of acquisition i, in sem_common.lua's order
-- ARGV[1] lease in ms; ARGV[2i] acquisition "<owner> <token> <waiter>
-- <permits>", ARGV[2i+1] channel prefix of acquisition i
-- Reply: an array of the numbers (from 1) of the acquisitions gone; every
-- other one was renewed.
local now, now_us = server_now()
local lease = tonumber(ARGV[1])
local all, gone = {}, {}
for i = 1, #KEYS do
  all[i] = KEYS[i]
end
for i = 1, #all / 5 do
  for k = 1, 5 do
    KEYS[k] = all[5 * (i - 1) + k]
  end
  meta_tok, meta_until, meta_undone = nil, nil, nil
  if sem_renew(now, now_us, ARGV[2 * i], lease, ARGV[2 * i + 1]) == 0 then
    gone[#gone + 1] = i
  end
end
return gone
