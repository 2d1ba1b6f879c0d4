-- uses: lib fair_lib
-- End a wait for the fair mutex that did not get the lock: take the wait's
-- member out of the queue at once, so the waiters behind it do not wait
-- for its place to lapse; if a release granted it the lock meanwhile (the
-- waiter gave up before it saw the grant), release that grant.
--
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] queue places zset
-- ARGV[1] the wait's member ("<owner> <wid> <lease ms>"), ARGV[2] waiter
-- channel prefix, ARGV[3] free-marker lifetime in ms
-- Reply: 1 left the queue, 2 released a grant, 0 neither.
local m = ARGV[1]
local v = redis.call('get', KEYS[1])
local o, t, c, rest, g
if v then
  o, t, c, rest, g = parse_value(v)
end
if redis.call('zrem', KEYS[3], m) == 1 then
  redis.call('lrem', KEYS[2], 0, m)
  if not v or o == '-' then
    -- Free: the new head may have been waiting behind this one.
    local now, us = server_now()
    grant_next(KEYS[1], KEYS[2], KEYS[3], tonumber(t or '0'), now, us, ARGV[2])
  end
  return 1
end
local _, wid = parse_member(m)
if v and g == wid and o ~= '-' then
  release_one(KEYS[1], KEYS[2], KEYS[3], o, t, c, rest, ARGV[3], ARGV[2])
  return 2
end
return 0
