-- uses: lib fair_lib
-- Acquire, re-enter or queue for the fair mutex.
--
-- The lock is a string "<owner> <token> <count>" as for the mutex, with
-- " <wid> <last>" appended when a release granted it (fair_lib.lua), and
-- after a release with nobody waiting a free marker "- <token> 0". The
-- lock goes only to the head of the queue (or to anyone when the queue is
-- empty); a caller that finds it free with another waiter first grants it
-- to that waiter (its holder's lease ran out, so no release did).
--
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] queue places zset, KEYS[4]
-- optional attempt marker (as in mutex_acquire.lua)
-- ARGV[1] owner, ARGV[2] lease in ms, ARGV[3] queue-place lease in ms,
-- ARGV[4] "1" for a try (never queues), ARGV[5] waiter channel prefix,
-- ARGV[6] the wait's wid
-- Reply: {1, token} acquired; {2, token} re-entered (the owner held it
-- through another wait); {3, token} granted to this wait by a release
-- whose message it has not seen; {0, ms, µs} not granted: call again within
-- ms; µs is the server time now, against which the caller reads the time
-- of a grant's message (fair_lib.lua).
if undone(KEYS[4]) then
  return {0, 0} -- the undo of this attempt ran first: do nothing
end
local owner, wid = ARGV[1], ARGV[6]
local m = owner .. ' ' .. wid .. ' ' .. ARGV[2]
local v = redis.call('get', KEYS[1])
local last, held = 0, false
if v then
  local o, t, c, rest, g = parse_value(v)
  if o == owner then
    if g == wid then
      -- The claim's lease starts now: the caller counts it from this
      -- attempt's send time, which may be long after the grant.
      redis.call('pexpire', KEYS[1], ARGV[2], 'gt')
      return granted(KEYS[4], ARGV[2], {3, tonumber(t)})
    end
    redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (c + 1) .. rest, 'px', ARGV[2])
    if redis.call('zrem', KEYS[3], m) == 1 then
      redis.call('lrem', KEYS[2], 0, m)
    end
    return granted(KEYS[4], ARGV[2], {2, tonumber(t)})
  end
  if o == '-' then
    last = tonumber(t)
  else
    held = true
  end
end
local now, us = server_now()
local wait
if held then
  wait = math.max(redis.call('pttl', KEYS[1]), 1)
else
  local head = live_head(KEYS[2], KEYS[3], now)
  if not head or head == m then
    if head then
      redis.call('lpop', KEYS[2])
      redis.call('zrem', KEYS[3], m)
    end
    -- Fencing token as for the mutex: past the last one and the clock in µs.
    local tok = next_token(last, us)
    redis.call('set', KEYS[1], owner .. ' ' .. fmt(tok) .. ' 1', 'px', ARGV[2])
    return granted(KEYS[4], ARGV[2], {1, tok})
  end
  grant_next(KEYS[1], KEYS[2], KEYS[3], last, now, us, ARGV[5])
  wait = math.max(redis.call('pttl', KEYS[1]), 1)
end
if ARGV[4] ~= '1' then
  queue_member(KEYS[2], KEYS[3], m, now, tonumber(ARGV[3]))
end
return {0, wait, us}
