-- uses: lib
-- Extend the leases of many holds in one call, each only if it is still
-- that owner's hold: the renewal loop's batch form of mutex_renew.lua. In a
-- cluster the caller batches only keys of one slot.
--
-- The values are read with one MGET, the leases set with PEXPIREAT to one
-- deadline spelled once (fmt): measured with callgrind (bench
-- -instr-renew), a GET and a PEXPIRE per hold cost about a third more, and
-- a Lua number given to redis.call is spelled with printf's %.17g.
--
-- KEYS[i] lock key of hold i
-- ARGV[1] lease in ms, ARGV[i+1] "<owner> <token> " of hold i
-- Reply: an array of the numbers (from 1) of the holds gone; every other
-- hold was renewed.
local now = server_now()
local at = fmt(now + tonumber(ARGV[1]))
local vs, gone, find = redis.call('mget', unpack(KEYS)), {}, string.find
for i = 1, #KEYS do
  local v = vs[i]
  if v and find(v, ARGV[i + 1], 1, true) == 1 then
    redis.call('pexpireat', KEYS[i], at)
  else
    gone[#gone + 1] = i
  end
end
return gone
