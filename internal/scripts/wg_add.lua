-- uses: lib
-- Add delta to a WaitGroup counter; wake the waiters when it reaches zero.
--
-- The counter is a string key changed with INCRBY, so it is exact over the
-- whole int64 range (Lua numbers are doubles, exact only to 2^53). The
-- generation key holds the server time in µs when the counter last left
-- zero: a Wait belongs to the generation it observed, and a generation
-- ends when the counter reaches zero, whatever the counter does next. Both
-- keys exist only while the counter is above zero.
--
-- KEYS[1] counter, KEYS[2] wakeup channel, KEYS[3] generation
-- ARGV[1] delta (a decimal int64)
-- Reply: {1, counter} applied; {0, counter} the counter would go negative;
-- {-1, counter} the result is outside int64. The counter is a decimal
-- string; a refused Add leaves both keys unchanged.
local cur = redis.call('get', KEYS[1]) or '0'
local r = redis.pcall('incrby', KEYS[1], ARGV[1])
if type(r) == 'table' then
  return {-1, cur} -- INCRBY refused: it would overflow, nothing changed
end
if r < 0 then
  if cur == '0' then
    redis.call('del', KEYS[1])
  else
    redis.call('set', KEYS[1], cur)
  end
  return {0, cur}
end
if r == 0 then
  redis.call('del', KEYS[1], KEYS[3])
  redis.call('publish', KEYS[2], '0')
  return {1, '0'}
end
if cur == '0' then
  local _, us = server_now()
  redis.call('set', KEYS[3], fmt(us))
end
return {1, redis.call('get', KEYS[1])}
