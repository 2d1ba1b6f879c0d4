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
-- too), then by the prefix made. A hold bound to a session (a count of 1
-- and " s<sid>" among its flags) is gone here; a hold with a count above
-- 1 (re-entered through another Client) keeps a TTL longer than the lease.
--
-- KEYS[i] lock key of hold i
-- ARGV[1] lease in ms, ARGV[i+1] "<owner> <token> 1" of hold i
-- Reply: an array of the numbers (from 1) of the holds gone; every other
-- hold was renewed.
local now = server_now()
local lease = tonumber(ARGV[1])
local at = fmt(now + lease)
local keys, argv, call, find = KEYS, ARGV, redis.call, string.find
local vs, gone = call('mget', unpack(keys)), {}
for i = 1, #keys do
  local v, a = vs[i], argv[i + 1]
  local ok = v == a or v and (find(v, a, 1, true) == 1 or find(v, string.sub(a, 1, -2), 1, true) == 1)
  local one = v == a or ok and find(v, a .. ' ', 1, true) == 1 -- a count of 1
  if ok and one and v ~= a and find(v, ' s', #a, true) then
    -- Bound to a session of the Client's (mutex_renew_session.lua) with
    -- a count of 1: a Client renews such a hold through its session,
    -- and asks this script only when it has none any more: the session
    -- it was bound to is gone, and the hold with it (lib.lua's
    -- lock_orphaned).
    ok = false
  end
  if ok and not one and call('pttl', keys[i]) >= lease then
    -- A count above 1 (shared by Clients): its TTL is never lowered (see
    -- mutex_renew_session.lua).
  elseif ok then
    call('pexpireat', keys[i], at)
  else
    gone[#gone + 1] = i
  end
end
return gone
