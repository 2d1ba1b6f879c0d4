-- uses: lib
-- A wait of a Client for a mutex ended without the lock: remove its entry
-- from the waiting count and, if no wait of any Client is left, the
-- value's " w" mark (see mutex_acquire.lua), so the release does not
-- publish to nobody. Entries are per wait: this script, sent in the
-- background after the wait gave up, may come after a newer wait of the
-- same Client registered; that wait's entry stays, and so does the mark.
-- If a release granted the lock to the wait as it gave up (lib.lua's
-- lock_grant), the grant is released: granted on to the next wait, or
-- freed.
--
-- KEYS[1] lock key, KEYS[2] waiting hash
-- ARGV[1] the Client, ARGV[2] the wait (the last 8 characters of its
-- attempt marker, as the acquire names it), ARGV[3] (optional) the
-- wait's owner, when it was made for the wait alone, and ARGV[4]
-- (optional) its lease in ms: its place in the queue for a grant goes
-- too
-- Reply: 1 when the mark was removed, 2 when a grant was released, 0
-- otherwise.
local f = ARGV[1] .. ' ' .. ARGV[2]
redis.call('hdel', KEYS[2], f)
if ARGV[4] then
  redis.call('lrem', KEYS[1] .. ':gq', 1, ARGV[4] .. ' ' .. ARGV[3] .. ' ' .. f)
end
-- The lock is read once: here for a wait by its own owner, below
-- otherwise.
local v = ARGV[3] and redis.call('get', KEYS[1])
local o, t, c, w
if v then
  o, t, c, w = lock_parse(v)
end
if o and o == ARGV[3] and string.find(w, ' g', 1, true) then
  -- Granted as it gave up (an owner made for this wait alone).
  if lock_release_one(KEYS[1], o, t, c, w) then
    return 2
  end
  -- On to the next wait queued (another of this Client's, say, which
  -- the mark does not count), or freed.
  local marked = string.find(w, 'w', 1, true)
  if not lock_grant(KEYS[1], t) then
    redis.call('set', KEYS[1], '- ' .. t .. ' 0', 'keepttl')
    if marked then
      redis.call('publish', KEYS[1] .. ':ch', t)
    end
  end
  return 2
end
if redis.call('exists', KEYS[2]) == 1 then
  return 0
end
if not ARGV[3] then
  v = redis.call('get', KEYS[1])
end
if v and string.sub(v, -2) == ' w' then
  redis.call('set', KEYS[1], string.sub(v, 1, -3), 'keepttl')
  return 1
end
return 0
