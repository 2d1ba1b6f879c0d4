-- uses: lib election_lib
-- Keep the records of many live terms in one call (election_touch.lua for
-- each), the renewal loop's batch form. In a cluster the caller batches
-- only keys of one slot.
--
-- KEYS[2i-1] lock, KEYS[2i] record list of term i
-- ARGV[1] the Client's lease in ms (unused: every record has its own
-- lifetime); ARGV[3i-1] owner, ARGV[3i] token (the term), ARGV[3i+1]
-- record lifetime in ms of term i
-- Reply: an array of the numbers (from 1) of the terms whose lock is no
-- longer their owner's; every other record was kept.
local gone = {}
for i = 1, #KEYS / 2 do
  local o, t = holder(KEYS[2 * i - 1])
  local a = 3 * i - 1
  if o == ARGV[a] and t == ARGV[a + 1] then
    redis.call('pexpire', KEYS[2 * i], ARGV[a + 2])
  else
    gone[#gone + 1] = i
  end
end
return gone
