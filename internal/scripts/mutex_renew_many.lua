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
-- A hold's argument is the value it most often has, "<owner> <token> 1"
-- (a count of 1, no flags): MGET then makes no Lua string of its own for
-- that value (Lua interns strings, and the argument's is there already:
-- one found instead of one allocated and collected), and the check is a
-- comparison of two interned strings: 12,271 -> 11,003 instructions per
-- renewed Mutex (bench -instr-renew 1000, 2026-12-04). Any other value is
-- checked as before, by its
-- prefix "<owner> <token> " (the argument less its count): first whether
-- it starts with the whole argument (a count of 1 and flags: a prefix
-- too), then by the prefix made.
--
-- KEYS[i] lock key of hold i
-- ARGV[1] lease in ms, ARGV[i+1] "<owner> <token> 1" of hold i
-- Reply: an array of the numbers (from 1) of the holds gone; every other
-- hold was renewed.
local now = server_now()
local at = fmt(now + tonumber(ARGV[1]))
local keys, argv, call, find = KEYS, ARGV, redis.call, string.find
local vs, gone = call('mget', unpack(keys)), {}
for i = 1, #keys do
  local v, a = vs[i], argv[i + 1]
  if v == a or v and (find(v, a, 1, true) == 1 or find(v, string.sub(a, 1, -2), 1, true) == 1) then
    call('pexpireat', keys[i], at)
  else
    gone[#gone + 1] = i
  end
end
return gone
