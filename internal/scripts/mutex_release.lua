-- uses: lib
-- Release one hold of the reentrant mutex.
--
-- KEYS[1] lock key (its wakeup channel is "<lock key>:ch")
-- ARGV[1] the hold: "<owner> <token> 1", the value of the owner's only
-- hold of token, which the renewal checks too (mutex_renew.lua; the
-- common case compares the value with it, no string made), or "<owner>"
-- (no space) for any hold of the owner, its token unknown; ARGV[2] (optional, for a known
-- hold: the token itself) the last fencing token actually issued under
-- the hold, which the free marker records: the value records the last
-- token reserved, which may be ahead of the server clock, and the next
-- acquisition must continue from the last one used, so that tokens never
-- run ahead of the clock (mutex_acquire.lua).
--
-- The common case, the holder's last release, is one command: the free
-- marker "- <used> 0" replaces the value in one SET ... GET, keeping the
-- key's TTL (the rest of the lease: the marker only has to outlive the
-- tokens issued under the hold until the server clock passes them, see
-- mutex_acquire.lua). Any other case puts the old value back, TTL kept;
-- without XX (one argument less), a SET that found no key made one, which
-- the script deletes.
-- The wakeup is published only if a waiter marked the value " w" (see
-- mutex_acquire.lua for the flags).
-- Reply: 1 released (the lock is free), 2 count decremented (the owner still
-- holds it), 0 not held by this owner.
--
-- The library (lib.lua) comes after the common case, which needs none of
-- it, in a function made only when the script gets that far: the common
-- case runs in a small frame (a Lua call clears its function's whole
-- stack frame first).
local key, p = KEYS[1], ARGV[1]
local owner, tok, used, v = p, nil, nil, nil
local i = string.find(p, ' ', 1, true)
if i then
  tok = string.sub(p, i + 1, -3)
  used = ARGV[2] or tok
  v = redis.call('set', key, '- ' .. used .. ' 0', 'keepttl', 'get')
  if v == p and used == tok then
    -- The common case, told without a pattern's captures (owners have no
    -- spaces, tokens are digits: the parse below would read the same): the
    -- owner's only hold, of this token, no block and no waiter's mark; the
    -- marker written above is the release.
    return 1
  end
  owner = string.sub(p, 1, i - 1)
else
  v = redis.call('get', key)
end
return (function()
if not v then
  if tok then
    -- The SET above made the key: there was none.
    redis.call('del', key)
  end
  return 0
end
-- (lib.lua here)
local o, t, c, w = lock_parse(v)
if o == '-' and tok and (t == tok or t == used) then
  -- Our own earlier release whose reply was lost: retrying is a no-op.
  if t ~= used then
    redis.call('set', key, v, 'keepttl')
  end
  return 1
end
local mine = o == owner and (not tok or t == tok)
if mine and lock_release_one(key, o, t, c, w) then
  return 2
end
if not mine then
  if used then
    redis.call('set', key, v, 'keepttl')
  end
  return 0
end
if string.find(w, 'w', 1, true) and lock_grant(key, used or t) then
  -- Granted to the longest-waiting wait of another Client (lib.lua).
  return 1
end
if not used then
  redis.call('set', key, '- ' .. t .. ' 0', 'keepttl')
end
if string.find(w, 'w', 1, true) then
  redis.call('publish', key .. ':ch', used or t)
end
return 1
end)()
