-- Release one hold of the reentrant mutex.
--
-- KEYS[1] lock key, KEYS[2] wakeup channel
-- ARGV[1] owner, ARGV[2] token of the hold or "0" when unknown,
-- ARGV[3] unused (kept for the callers' argument layout),
-- ARGV[4] (optional, "0": the token of the hold) the last fencing token
-- actually issued under this hold, which the free marker records: the value
-- records the last token reserved, which may be ahead of the server clock,
-- and the next acquisition must continue from the last one used, so that
-- tokens never run ahead of the clock (mutex_acquire.lua).
--
-- The common case, the holder's last release, is one command: the free
-- marker "- <used> 0" replaces the value in one SET ... GET, keeping the
-- key's TTL (the rest of the lease: the marker only has to outlive the
-- tokens issued under the hold until the server clock passes them, see
-- mutex_acquire.lua). Any other case puts the old value back, TTL kept.
-- The wakeup is published only if a waiter marked the value " w" (see
-- mutex_acquire.lua for the flags).
-- Reply: 1 released (the lock is free), 2 count decremented (the owner still
-- holds it), 0 not held by this owner.
local used = ARGV[4]
if not used or used == '0' then
  used = ARGV[2]
end
local v
if used ~= '0' then
  v = redis.call('set', KEYS[1], '- ' .. used .. ' 0', 'xx', 'keepttl', 'get')
else
  v = redis.call('get', KEYS[1])
end
if not v then
  return 0
end
if used == ARGV[2] and used ~= '0' and ARGV[1] ~= '-' and v == ARGV[1] .. ' ' .. used .. ' 1' then
  -- The common case, told without a pattern's captures (owners have no
  -- spaces, tokens are digits: the parse below would read the same): the
  -- owner's only hold, of this token, no block and no waiter's mark; the
  -- marker written above is the release.
  return 1
end
local o, t, c, w = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
if o == '-' and ARGV[2] ~= '0' and (t == ARGV[2] or t == used) then
  -- Our own earlier release whose reply was lost: retrying is a no-op.
  if t ~= used and used ~= '0' then
    redis.call('set', KEYS[1], v, 'keepttl')
  end
  return 1
end
local mine = o == ARGV[1] and (ARGV[2] == '0' or t == ARGV[2])
c = tonumber(c)
if mine and c > 1 then
  redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (c - 1) .. w, 'keepttl')
  return 2
end
if not mine then
  if used ~= '0' then
    redis.call('set', KEYS[1], v, 'keepttl')
  end
  return 0
end
if used == '0' then
  redis.call('set', KEYS[1], '- ' .. t .. ' 0', 'keepttl')
end
if string.find(w, 'w', 1, true) then
  redis.call('publish', KEYS[2], used == '0' and t or used)
end
return 1
