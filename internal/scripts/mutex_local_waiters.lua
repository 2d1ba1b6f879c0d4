-- uses: lib
-- Record how many goroutines of a Client wait for a mutex inside their
-- process (its local queue, and the goroutine it queues behind when that
-- one waits in Redis), so that Inspect counts the waiters of the holder's
-- own Client too (see mutex_acquire.lua for the waiting count). The entry
-- lives one lease unless written again (a Client whose goroutines keep
-- waiting rewrites it every lease/3), so a Client that died leaves none
-- for longer. Removing the last entry also removes the value's " w" mark,
-- as mutex_unwait.lua does (a wait's end that came while this entry was
-- there left it).
--
-- KEYS[1] the lock key, KEYS[2] the waiting hash "<client> <wait>" ->
-- "<waiters> <expiry ms>"
-- ARGV[1] the field ("<client> local"), ARGV[2] the goroutines waiting
-- ("0": remove the entry), ARGV[3] the lease in ms
-- Reply: 1 written, 0 removed.
if ARGV[2] == '0' then
  redis.call('hdel', KEYS[2], ARGV[1])
  if redis.call('exists', KEYS[2]) == 0 then
    local v = redis.call('get', KEYS[1])
    if v and string.sub(v, -2) == ' w' then
      redis.call('set', KEYS[1], string.sub(v, 1, -3), 'keepttl')
    end
  end
  return 0
end
local now = server_now()
redis.call('hset', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. fmt(now + tonumber(ARGV[3])))
if redis.call('pttl', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[2], ARGV[3])
end
return 1
