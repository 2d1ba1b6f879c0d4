-- uses: lib fair_lib rw_lib
-- End a wait for an rw mutex that did not get the lock: take its member
-- out at once, so nobody waits for its place to lapse, and pass the lock
-- on if that lets someone in (a writer that was first, or the last writer
-- that held readers back); if a release granted it the lock meanwhile (the
-- waiter gave up before it saw the grant), release that grant.
--
-- KEYS[1..6] as in rw_lib.lua
-- ARGV[1] "read" or "write", ARGV[2] the wait's member ("<owner> <wid>
-- <lease ms>"), ARGV[3] waiter channel prefix
-- Reply: 1 left, 2 released a grant, 0 neither.
local now, us = server_now()
local m = ARGV[2]
local owner, wid = parse_member(m)
if ARGV[1] == 'read' then
  if redis.call('zrem', KEYS[5], m) == 1 then
    return 1
  end
  rw_load(owner)
  local c, t, g = string.match(rw_r or '', '^(%d+) (%d+) ?(%S*)$')
  if g ~= wid or not c then
    return 0
  end
  if tonumber(c) > 1 then
    redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) - 1) .. ' ' .. t .. ' ' .. g)
  else
    redis.call('hdel', KEYS[1], 'r:' .. owner)
    redis.call('zrem', KEYS[2], owner)
    rw_hand_on(now, us, ARGV[3], false)
  end
  return 2
end
if redis.call('zrem', KEYS[4], m) == 1 then
  redis.call('lrem', KEYS[3], 0, m)
  rw_hand_on(now, us, ARGV[3], false)
  return 1
end
local w, _, wc, _, wg = rw_writer(now)
if w ~= owner or wg ~= wid then
  return 0
end
if tonumber(wc) > 1 then
  redis.call('hincrby', KEYS[1], 'wc', -1)
else
  rw_end_writer()
  rw_hand_on(now, us, ARGV[3], true)
  rw_drop_writer()
end
return 2
