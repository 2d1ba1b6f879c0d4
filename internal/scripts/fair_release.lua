-- uses: lib fair_lib
-- Release one hold of the fair mutex; the last count grants the lock to the
-- head of the queue (fair_lib.lua).
--
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] queue places zset
-- ARGV[1] owner, ARGV[2] token of the hold or "0" when unknown,
-- ARGV[3] free-marker lifetime in ms, ARGV[4] waiter channel prefix
-- Reply: 1 released, 2 count decremented (still held), 0 not held by owner.
local v = redis.call('get', KEYS[1])
if not v then
  return 0
end
local o, t, c, rest, _, last = parse_value(v)
if (o == '-' and t == ARGV[2]) or (last == ARGV[2] and last ~= '0') then
  -- Our own earlier release whose reply was lost (it left the free marker,
  -- or granted the lock on): retrying is a no-op.
  return 1
end
if o ~= ARGV[1] or (ARGV[2] ~= '0' and t ~= ARGV[2]) then
  return 0
end
return release_one(KEYS[1], KEYS[2], KEYS[3], o, t, c, rest, ARGV[3], ARGV[4])
