-- A Client's waiters of a mutex stopped waiting without the lock: remove
-- its entry from the waiting count and, if no Client waits any more, the
-- value's " w" mark (see mutex_acquire.lua), so the release does not
-- publish to nobody.
--
-- KEYS[1] lock key, KEYS[2] waiting hash
-- ARGV[1] the Client
-- Reply: 1 when the mark was removed, 0 otherwise.
redis.call('hdel', KEYS[2], ARGV[1])
if redis.call('exists', KEYS[2]) == 1 then
  return 0
end
local v = redis.call('get', KEYS[1])
if v and string.sub(v, -2) == ' w' then
  redis.call('set', KEYS[1], string.sub(v, 1, -3), 'keepttl')
  return 1
end
return 0
