-- A wait of a Client for a mutex ended without the lock: remove its entry
-- from the waiting count and, if no wait of any Client is left, the
-- value's " w" mark (see mutex_acquire.lua), so the release does not
-- publish to nobody. Entries are per wait: this script, sent in the
-- background after the wait gave up, may come after a newer wait of the
-- same Client registered; that wait's entry stays, and so does the mark.
--
-- KEYS[1] lock key, KEYS[2] waiting hash
-- ARGV[1] the Client, ARGV[2] the wait (the last 8 characters of its
-- attempt marker, as the acquire names it)
-- Reply: 1 when the mark was removed, 0 otherwise.
redis.call('hdel', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
if redis.call('exists', KEYS[2]) == 1 then
  return 0
end
local v = redis.call('get', KEYS[1])
if v and string.sub(v, -2) == ' w' then
  redis.call('set', KEYS[1], string.sub(v, 1, -3), 'keepttl')
  return 1
end
return 0
