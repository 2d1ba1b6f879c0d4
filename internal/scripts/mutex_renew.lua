-- Extend the lease of a hold, only if it is still this owner's hold: the
-- reference mutex_renew_many.lua is checked against (renew_many_test.go).
--
-- A hold bound to a session of its Client's (a count of 1 and " s<sid>"
-- among its flags, mutex_renew_session.lua) is gone here: its Client
-- renews it through the session. A hold with a count above 1 (re-entered
-- through another Client) keeps a TTL longer than the lease.
--
-- KEYS[1] lock key
-- ARGV[1] "<owner> <token> " (the value's prefix), ARGV[2] lease in ms
-- Reply: 1 renewed, 0 the hold is gone.
local v = redis.call('get', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  local c, rest = string.match(v, '^(%d+)(.*)$', #ARGV[1] + 1)
  if c == '1' and string.find(rest, ' s', 1, true) then
    return 0
  end
  if c ~= '1' and redis.call('pttl', KEYS[1]) >= tonumber(ARGV[2]) then
    return 1
  end
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
