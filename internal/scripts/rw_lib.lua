-- Shared prelude of the rw scripts (prepended after fair_lib.lua in Go).
--
-- KEYS[1] lock hash, KEYS[2] reader leases zset (owner -> lease end, server
-- ms), KEYS[3] writer queue list, KEYS[4] writer queue places zset,
-- KEYS[5] waiting readers zset (owner -> place end), KEYS[6] admitted
-- readers zset (owner -> place end).
--
-- The rules (the RWMutex type doc says them for users):
--  - Readers share; a writer excludes everyone. Writers queue in arrival
--    order; while one is queued, new readers wait (writers are not starved).
--  - Phase-fair: a reader that waits is registered in KEYS[5]. When a
--    writer releases, every registered reader is admitted (moved to
--    KEYS[6]): admitted readers pass the queued writers, and no writer is
--    granted while an admitted reader has not yet taken its hold (or left,
--    or let its place lapse). So neither side starves.
--  - Upgrade: the only reader may take the write lock ahead of queued
--    writers (they could not get in before it leaves anyway); with other
--    readers it queues and is woken when it is the only reader left.
--  - Downgrade: the writer may take the read lock; releasing the write lock
--    then keeps the read hold.
--
-- Hash fields: mode ("read" or "write", absent when free, as in Redisson),
-- tok (last fencing token, kept while free as a marker), w, wt, wc, wexp
-- (writer owner, token, count and lease end in server ms), and per reader
-- "r:<owner>" = "<count> <token>". Every hold has its own lease, so a dead
-- reader's hold lapses alone however long the others keep theirs.

-- rw_mode sets the mode field from what is held and returns it (or false).
local function rw_mode()
  local m = false
  if redis.call('hexists', KEYS[1], 'w') == 1 then
    m = 'write'
  elseif redis.call('zcard', KEYS[2]) > 0 then
    m = 'read'
  end
  if m then
    redis.call('hset', KEYS[1], 'mode', m)
  else
    redis.call('hdel', KEYS[1], 'mode')
  end
  return m
end

-- rw_prune drops the holds and queued writers whose lease lapsed by now.
local function rw_prune(now)
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('hdel', KEYS[1], 'r:' .. o)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  end
  local wexp = redis.call('hget', KEYS[1], 'wexp')
  if wexp and tonumber(wexp) <= now then
    redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp')
  end
  prune_queue(KEYS[3], KEYS[4], now)
  redis.call('zremrangebyscore', KEYS[5], '-inf', now)
  redis.call('zremrangebyscore', KEYS[6], '-inf', now)
  return rw_mode()
end

-- rw_admit admits every waiting reader (phase-fair; see above) and reports
-- whether any reader is admitted now.
local function rw_admit(now)
  if redis.call('zcard', KEYS[5]) > 0 then
    redis.call('zunionstore', KEYS[6], 2, KEYS[6], KEYS[5], 'aggregate', 'max')
    redis.call('del', KEYS[5])
    local top = redis.call('zrange', KEYS[6], -1, -1, 'withscores')
    redis.call('pexpire', KEYS[6], math.max(tonumber(top[2]) - now, 1))
  end
  return redis.call('zcard', KEYS[6]) > 0
end

-- rw_wake_upgrader wakes the only reader left if it waits for the write
-- lock (an upgrade), since it may now take it ahead of queued writers.
local function rw_wake_upgrader(wch)
  if redis.call('zcard', KEYS[2]) == 1 then
    local r = redis.call('zrange', KEYS[2], 0, 0)[1]
    if redis.call('zscore', KEYS[4], r) then
      redis.call('publish', wch .. r, 'turn')
    end
  end
end

-- rw_touch sets the keys' lifetime: to the last lease end while anything is
-- held, else an hour, keeping tok so the next token continues from it.
local function rw_touch(now)
  local last = tonumber(redis.call('hget', KEYS[1], 'wexp') or '0')
  local top = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
  if top[2] then
    last = math.max(last, tonumber(top[2]))
  end
  if last > now then
    redis.call('pexpire', KEYS[1], fmt(last - now))
    redis.call('pexpire', KEYS[2], fmt(last - now))
  else
    redis.call('pexpire', KEYS[1], 3600000)
  end
end

-- rw_token returns the next fencing token: past the last, and not below the
-- server clock in µs.
local function rw_token(us)
  local tok = math.max(tonumber(redis.call('hget', KEYS[1], 'tok') or '0') + 1, us)
  redis.call('hset', KEYS[1], 'tok', fmt(tok))
  return tok
end

-- rw_wait is how long a blocked caller may wait before it must look again:
-- until the first lease that could end the block.
local function rw_wait(now)
  local t = 1e18
  local wexp = redis.call('hget', KEYS[1], 'wexp')
  if wexp then
    t = math.min(t, tonumber(wexp))
  end
  for _, z in ipairs({KEYS[2], KEYS[4], KEYS[6]}) do
    local first = redis.call('zrange', z, 0, 0, 'withscores')
    if first[2] then
      t = math.min(t, tonumber(first[2]))
    end
  end
  if t == 1e18 then
    return 1
  end
  return math.max(t - now, 1)
end
