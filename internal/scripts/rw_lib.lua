-- uses: lib fair_lib
-- The prelude of the rw scripts (see lib.lua).
--
-- KEYS[1] lock hash, KEYS[2] reader leases zset (owner -> lease end, server
-- ms), KEYS[3] writer queue list, KEYS[4] writer queue places zset,
-- KEYS[5] waiting readers zset (member -> place end), KEYS[6] unused.
-- Queue members are "<owner> <wid> <lease ms>", as for the fair mutex
-- (fair_lib.lua): wid names one wait of one Client, told of its grant on
-- the channel prefix .. client id by "<n> <token>".
--
-- The rules (the RWMutex type doc says them for users):
--  - Readers share; a writer excludes everyone. Writers queue in arrival
--    order; while one holds or is queued, new readers wait (writers are
--    not starved), registered in KEYS[5].
--  - Phase-fair, by grants: a write release grants a read hold to every
--    reader that waited, ahead of the queued writers; when the last read
--    hold ends, the first queued writer is granted the lock. So neither
--    side starves, and nobody is woken only to find the lock taken.
--  - Upgrade: the only reader may take the write lock ahead of queued
--    writers (they could not get in before it leaves anyway); with other
--    readers it queues and is granted the lock when it is the only reader
--    left.
--  - Downgrade: the writer may take the read lock; releasing the write lock
--    then keeps the read hold.
--
-- Hash fields: mode ("read" or "write", absent when free, as in Redisson),
-- tok (last fencing token, kept while free), w, wt, wc, wexp, wg (writer
-- owner, token, count, lease end in server ms, and the wid it was granted
-- to, if a release granted it), and per reader "r:<owner>" = "<count>
-- <token>" (" <wid>" appended when granted). Every hold has its own lease,
-- so a dead reader's hold lapses alone however long the others keep
-- theirs.

-- rw_token returns the next fencing token: past the last, and not below the
-- server clock in µs. The caller stores it (field tok) with its other
-- writes.
local rw_last
local function rw_token(us)
  if not rw_last then
    rw_last = tonumber(redis.call('hget', KEYS[1], 'tok') or '0')
  end
  rw_last = next_token(rw_last, us)
  return fmt(rw_last)
end

-- rw_keep keeps the hash (an hour past a lease, so tok survives) and the
-- readers zset alive for a hold of lease ms.
local function rw_keep(lease, reader)
  keep_alive(KEYS[1], lease + 3600000)
  if reader then
    keep_alive(KEYS[2], lease)
  end
end

-- rw_writer returns the live writer's owner, token, count, lease end and
-- grant wid; a writer whose lease lapsed is removed.
local function rw_writer(now)
  local w = redis.call('hmget', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg')
  if w[1] and tonumber(w[4]) <= now then
    redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg')
    return nil
  end
  return w[1], w[2], w[3], w[4], w[5] or ''
end

-- rw_prune_readers drops the read holds whose lease lapsed.
local function rw_prune_readers(now)
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('hdel', KEYS[1], 'r:' .. o)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  end
end

-- rw_readers drops the read holds whose lease lapsed and returns how many
-- remain.
local function rw_readers(now)
  rw_prune_readers(now)
  return redis.call('zcard', KEYS[2])
end

-- rw_take_write makes owner the writer with a new token; wid when a
-- release granted it (and its Client is told).
local function rw_take_write(owner, lease, now, us, wid, wch)
  local tok = rw_token(us)
  redis.call('hset', KEYS[1], 'w', owner, 'wt', tok, 'wc', 1, 'wexp', fmt(now + lease), 'wg', wid or '', 'mode', 'write', 'tok', tok)
  rw_keep(lease, false)
  if wid then
    local cid, n = string.match(wid, '^([^%s%.]+)%.(%S+)$')
    redis.call('publish', wch .. cid, n .. ' ' .. tok)
  end
  return tok
end

-- rw_grant_writer grants the write lock to the first live queued writer,
-- if any, and reports whether it did.
local function rw_grant_writer(now, us, wch)
  local m = redis.call('lpop', KEYS[3])
  while m do
    local s = redis.call('zscore', KEYS[4], m)
    if s then
      redis.call('zrem', KEYS[4], m)
      if tonumber(s) > now then
        local o, wid, _, _, ls = parse_member(m)
        rw_take_write(o, tonumber(ls), now, us, wid, wch)
        return true
      end
    end
    m = redis.call('lpop', KEYS[3])
  end
  return false
end

-- rw_grant_readers grants a read hold to every reader that waits (place
-- live) and tells each; a reader whose owner already reads is only told to
-- look again (it re-enters). It reports whether it granted any.
local function rw_grant_readers(now, us, wch)
  local rs = redis.call('zrangebyscore', KEYS[5], '(' .. now, '+inf')
  redis.call('del', KEYS[5])
  local tok, longest = nil, 0
  for _, m in ipairs(rs) do
    local o, wid, cid, n, ls = parse_member(m)
    if redis.call('hexists', KEYS[1], 'r:' .. o) == 1 then
      redis.call('publish', wch .. cid, n)
    else
      tok = rw_token(us)
      redis.call('hset', KEYS[1], 'r:' .. o, '1 ' .. tok .. ' ' .. wid)
      redis.call('zadd', KEYS[2], now + tonumber(ls), o)
      redis.call('publish', wch .. cid, n .. ' ' .. tok)
      longest = math.max(longest, tonumber(ls))
    end
  end
  if not tok then
    return false
  end
  redis.call('hset', KEYS[1], 'mode', 'read', 'tok', tok)
  rw_keep(longest, true)
  return true
end

-- rw_member_of returns the writer-queue member of owner, if it is queued.
local function rw_member_of(owner)
  for _, m in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
    if string.sub(m, 1, #owner + 1) == owner .. ' ' then
      return m
    end
  end
end

-- rw_hand_on passes the lock on after a hold ended or a waiter left: with
-- no writer holding, the only reader left gets the write lock it waits
-- for (an upgrade); the waiting readers go first after a write release
-- (readers_first: they waited for that writer), and join readers that
-- hold when no writer is queued; with nothing held, the first queued
-- writer, else the waiting readers. It sets the mode field.
local function rw_hand_on(now, us, wch, readers_first)
  if rw_writer(now) then
    return
  end
  local readers = rw_readers(now)
  if readers > 0 then
    if readers == 1 then
      local r = redis.call('zrange', KEYS[2], 0, 0)[1]
      local m = rw_member_of(r)
      if m and redis.call('zscore', KEYS[4], m) then
        redis.call('lrem', KEYS[3], 0, m)
        redis.call('zrem', KEYS[4], m)
        local o, wid, _, _, ls = parse_member(m)
        rw_take_write(o, tonumber(ls), now, us, wid, wch)
        return
      end
    end
    if readers_first or not live_head(KEYS[3], KEYS[4], now) then
      rw_grant_readers(now, us, wch)
    end
    redis.call('hset', KEYS[1], 'mode', 'read')
    return
  end
  if readers_first and rw_grant_readers(now, us, wch) then
    return
  end
  if rw_grant_writer(now, us, wch) or rw_grant_readers(now, us, wch) then
    return
  end
  redis.call('hdel', KEYS[1], 'mode')
end
