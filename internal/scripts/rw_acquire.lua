-- Acquire or re-enter the read or the write lock of an rw mutex, under the
-- rules written at the top of rw_lib.lua: writers queue in arrival order
-- and hold back new readers; readers that waited for a writer are admitted
-- when it releases, ahead of later writers (phase-fair); the only reader
-- may upgrade ahead of queued writers; a writer may take the read lock.
--
-- KEYS[1..6] as in rw_lib.lua, KEYS[7] optional attempt marker (as in
-- mutex_acquire.lua)
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] lease in ms,
-- ARGV[4] queue-place lease in ms, ARGV[5] "1" for a try, ARGV[6] writer
-- channel prefix
-- Reply: {1, token} acquired; {2, token} re-entered; {0, ms} not granted:
-- call again within ms.
if undone(KEYS[7]) then
  return {0, 0} -- the undo of this attempt ran first: do nothing
end
local now, us = server_now()
rw_prune(now)
local owner, lease, place = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local w = redis.call('hget', KEYS[1], 'w')
if ARGV[1] == 'read' then
  local r = redis.call('hget', KEYS[1], 'r:' .. owner)
  if r then
    local c, t = string.match(r, '^(%d+) (%d+)$')
    redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) + 1) .. ' ' .. t)
    local s = tonumber(redis.call('zscore', KEYS[2], owner))
    redis.call('zadd', KEYS[2], math.max(s, now + lease), owner)
    rw_touch(now)
    return granted(KEYS[7], ARGV[3], {2, tonumber(t)})
  end
  local admitted = redis.call('zscore', KEYS[6], owner)
  local blocked
  if w then
    blocked = w ~= owner
  else
    -- Queued writers hold back new readers, not admitted ones.
    blocked = not admitted and redis.call('llen', KEYS[3]) > 0
  end
  if blocked then
    if ARGV[5] ~= '1' and not admitted then
      -- Wait as a registered reader, to be admitted at the next write
      -- release; the place lapses unless renewed by the next look.
      redis.call('zadd', KEYS[5], now + place, owner)
      if redis.call('pttl', KEYS[5]) < place then
        redis.call('pexpire', KEYS[5], place)
      end
    end
    return {0, rw_wait(now)}
  end
  redis.call('zrem', KEYS[5], owner)
  redis.call('zrem', KEYS[6], owner)
  local tok = rw_token(us)
  redis.call('hset', KEYS[1], 'r:' .. owner, '1 ' .. fmt(tok))
  redis.call('zadd', KEYS[2], now + lease, owner)
  rw_mode()
  rw_touch(now)
  return granted(KEYS[7], ARGV[3], {1, tok})
end
if w == owner then
  redis.call('hincrby', KEYS[1], 'wc', 1)
  local e = math.max(tonumber(redis.call('hget', KEYS[1], 'wexp')), now + lease)
  redis.call('hset', KEYS[1], 'wexp', fmt(e))
  rw_touch(now)
  return granted(KEYS[7], ARGV[3], {2, tonumber(redis.call('hget', KEYS[1], 'wt'))})
end
local readers = redis.call('zcard', KEYS[2])
local reading = redis.call('zscore', KEYS[2], owner)
if reading then
  readers = readers - 1
end
local admitted = redis.call('zcard', KEYS[6])
if redis.call('zscore', KEYS[6], owner) then
  admitted = admitted - 1
end
local head = redis.call('lindex', KEYS[3], 0)
-- The only reader upgrades ahead of the queue: the queued writers cannot
-- get in before it leaves, so making it wait for them would deadlock.
if not w and readers == 0 and admitted == 0 and (not head or head == owner or reading) then
  if redis.call('zrem', KEYS[4], owner) == 1 then
    redis.call('lrem', KEYS[3], 0, owner)
  end
  local tok = rw_token(us)
  redis.call('hset', KEYS[1], 'w', owner, 'wt', fmt(tok), 'wc', 1, 'wexp', fmt(now + lease))
  rw_mode()
  rw_touch(now)
  return granted(KEYS[7], ARGV[3], {1, tok})
end
local wait = rw_wait(now)
if not w and readers == 0 and admitted == 0 then
  -- Free for writers, but another one is first: make sure it knows.
  redis.call('publish', ARGV[6] .. head, 'turn')
  wait = place_left(KEYS[4], head, now)
end
if ARGV[5] ~= '1' then
  enqueue(KEYS[3], KEYS[4], owner, now, place)
end
return {0, wait}
