-- Remove the tag of a hold that ended, unless a later hold of the same
-- owner in Redis (a handoff inside one Client) already replaced it.
--
-- KEYS[1] the lock's tag hash (owner in Redis -> "<expiry ms> <tag>", see
-- tag_set.lua)
-- ARGV[1] owner, ARGV[2] the tag the hold wrote
-- Reply: 1 removed, 0 not there or replaced.
local v = redis.call('hget', KEYS[1], ARGV[1])
if v and string.match(v, '^%d+ (.*)$') == ARGV[2] then
  return redis.call('hdel', KEYS[1], ARGV[1])
end
return 0
