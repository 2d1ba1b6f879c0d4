-- Release one hold of the reentrant mutex.
--
-- KEYS[1] lock key, KEYS[2] wakeup channel
-- ARGV[1] owner, ARGV[2] token of the hold or "0" when unknown,
-- ARGV[3] free-marker lifetime in ms, ARGV[4] (optional) the last fencing
-- token actually issued under this hold, which the free marker records:
-- the value records the last token reserved, which may be ahead of the
-- server clock, and the next acquisition must continue from the last one
-- used, so that tokens never run ahead of the clock (mutex_acquire.lua).
-- The wakeup is published only if a waiter marked the value " w" (see
-- mutex_acquire.lua for the flags).
-- Reply: 1 released (the lock is free), 2 count decremented (the owner still
-- holds it), 0 not held by this owner.
local v = redis.call('get', KEYS[1])
if not v then
  return 0
end
local o, t, c, w = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
local used = ARGV[4]
if o == '-' and ARGV[2] ~= '0' and (t == ARGV[2] or t == used) then
  -- Our own earlier release whose reply was lost: retrying is a no-op.
  return 1
end
if not used or used == '0' then
  used = t
end
if o ~= ARGV[1] or (ARGV[2] ~= '0' and t ~= ARGV[2]) then
  return 0
end
c = tonumber(c)
if c > 1 then
  redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (c - 1) .. w, 'keepttl')
  return 2
end
redis.call('set', KEYS[1], '- ' .. used .. ' 0', 'px', ARGV[3])
if string.find(w, 'w', 1, true) then
  redis.call('publish', KEYS[2], used)
end
return 1
