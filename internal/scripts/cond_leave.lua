-- uses: lib cond_lib
-- Take a waiter of a Cond out: it woke (it takes its signal), or it gave
-- up (a signal it had been given passes on to the next waiter). It can be
-- repeated.
--
-- ARGV[1] waiter, ARGV[2] "1" to pass a signal on. Reply: 1 a signal was
-- passed on, 0 not.
prune()
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('zrem', KEYS[2], ARGV[1])
if redis.call('srem', KEYS[3], ARGV[1]) == 1 and ARGV[2] == '1' then
  return wake_one()
end
return 0
