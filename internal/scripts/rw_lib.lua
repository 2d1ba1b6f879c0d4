-- uses: lib fair_lib
-- The prelude of the rw scripts (see lib.lua).
--
-- KEYS[1] lock hash, KEYS[2] reader leases zset (owner -> lease end, server
-- ms), KEYS[3] writer queue list, KEYS[4] writer queue places zset,
-- KEYS[5] waiting readers zset (member -> place end), KEYS[6] unused.
-- Queue members are "<owner> <wid> <lease ms>", as for the fair mutex
-- (fair_lib.lua): wid names one wait of one Client, told of its grant on
-- the channel prefix .. client id by "<n> <token> <µs>" (µs: the grant's
-- server time, from which its lease runs).
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
--
-- Housekeeping only when something changed. Every script reads the hash's
-- fields once (rw_load, one HMGET), the ones below among them, and skips
-- the work they show is not needed:
--  - until: every key of the lock expires then (server ms). A script that
--    writes a lease or queue place ending at x leaves the keys alone while
--    until is 50 minutes past x, else moves until to an hour past it and
--    sets every key's expiry (rw_keep); a key a write may have created gets
--    until as its expiry (PEXPIREAT NX). So the keys live an hour past the
--    last lease, and an uncontended script sends no PEXPIRE.
--  - rn: no read hold's lease ends before it (each new read hold lowers it,
--    renewals only extend leases; "NEVER" when no read hold is left): the
--    readers are pruned only past it, and counted only when there may be
--    some (rw_prune_readers, rw_readers).
--  - rq: "0" when no reader waits (KEYS[5] is empty): a release grants
--    readers only when one may wait (rw_grant_readers).
--  - mode: written only when it changes.
-- A field that is absent (keys written before it existed) means "look".

-- NEVER is rn when no read hold is left.
local NEVER = 9000000000000000

-- The hash's fields as rw_load read them and this script changed them: the
-- writer (owner, token, count, lease end, grant wid), the last token, until,
-- rn, rq, mode, and the r:<owner> field rw_load was asked for.
local rw_loaded, rw_w, rw_wt, rw_wc, rw_wexp, rw_wg, rw_last, rw_until, rw_rn, rw_rq, rw_mode, rw_r

-- rw_load reads the hash's fields once per script, with owner's read hold
-- ("r:<owner>") if owner is given.
local function rw_load(owner)
  if rw_loaded then
    return
  end
  rw_loaded = true
  local v
  if owner then
    v = redis.call('hmget', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg', 'tok', 'until', 'rn', 'rq', 'mode', 'r:' .. owner)
  else
    v = redis.call('hmget', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg', 'tok', 'until', 'rn', 'rq', 'mode')
  end
  rw_w, rw_wt, rw_wc, rw_wexp, rw_wg = v[1], v[2], v[3], v[4], v[5]
  rw_last, rw_until, rw_rn = tonumber(v[6] or '0'), tonumber(v[7]), tonumber(v[8])
  rw_rq, rw_mode, rw_r = v[9], v[10], v[11]
end

-- rw_token returns the next fencing token: past the last, and not below the
-- server clock in µs. The caller stores it (field tok) with its other
-- writes.
local function rw_token(us)
  rw_load()
  rw_last = next_token(rw_last, us)
  return fmt(rw_last)
end

-- rw_keep keeps every key of the lock alive past x, a lease or queue place
-- end this script wrote (see until above); k1 and k2 are keys the write
-- may have created.
local function rw_keep(x, k1, k2)
  rw_load()
  if rw_until and rw_until >= x + 3000000 then
    if k1 then
      redis.call('pexpireat', k1, rw_until, 'nx')
    end
    if k2 then
      redis.call('pexpireat', k2, rw_until, 'nx')
    end
    return
  end
  local last, f = x, {}
  if not rw_until then
    -- The first time (a new lock, or keys older than until): no hold may
    -- outlive the keys, and rn and rq are recorded.
    last = math.max(last, tonumber(rw_wexp or '0'))
    local r = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
    last = math.max(last, tonumber(r[2] or '0'))
    r = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    rw_rn = tonumber(r[2]) or NEVER
    rw_rq = redis.call('exists', KEYS[5]) == 1 and '1' or '0'
    f = {'rn', fmt(rw_rn), 'rq', rw_rq}
  end
  rw_until = last + 3600000
  redis.call('hset', KEYS[1], 'until', fmt(rw_until), unpack(f))
  for i = 1, 5 do
    redis.call('pexpireat', KEYS[i], rw_until)
  end
end

-- rw_writer returns the live writer's owner, token, count, lease end and
-- grant wid; a writer whose lease lapsed is removed.
local function rw_writer(now)
  rw_load()
  if rw_w and tonumber(rw_wexp) <= now then
    redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg')
    rw_w = nil
  end
  if not rw_w then
    return nil
  end
  return rw_w, rw_wt, rw_wc, rw_wexp, rw_wg or ''
end

-- rw_set_mode writes the mode field if it changes: "read", "write", or nil
-- (free).
local function rw_set_mode(mode)
  if rw_mode == mode then
    return
  end
  rw_mode = mode
  if mode then
    redis.call('hset', KEYS[1], 'mode', mode)
  else
    redis.call('hdel', KEYS[1], 'mode')
  end
end

-- rw_prune_readers drops the read holds whose lease lapsed (none can have
-- before rn), and records rn when the hash has its lifetime (until).
local function rw_prune_readers(now)
  rw_load()
  if rw_rn and rw_rn > now then
    return
  end
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('hdel', KEYS[1], 'r:' .. o)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  end
  if rw_until then
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    rw_rn = tonumber(first[2]) or NEVER
    redis.call('hset', KEYS[1], 'rn', fmt(rw_rn))
  end
end

-- rw_readers drops the read holds whose lease lapsed and returns how many
-- remain.
local function rw_readers(now)
  rw_prune_readers(now)
  if rw_rn == NEVER then
    return 0
  end
  return redis.call('zcard', KEYS[2])
end

-- rw_add_reader gives owner o the read hold v ("<count> <token>[ <wid>]")
-- with its lease ending at x, writing the other fields given (name, value
-- pairs) with it; rn moves down to x if that is earlier.
local function rw_add_reader(o, v, x, ...)
  local f = {'r:' .. o, v, ...}
  if rw_rn and x < rw_rn then
    rw_rn = x
    f[#f + 1] = 'rn'
    f[#f + 1] = fmt(x)
  end
  redis.call('hset', KEYS[1], unpack(f))
  if redis.call('zadd', KEYS[2], x, o) == 1 then
    rw_keep(x, KEYS[2])
  else
    rw_keep(x)
  end
end

-- rw_take_write makes owner the writer with a new token; wid when a
-- release granted it (and its Client is told).
local function rw_take_write(owner, lease, now, us, wid, wch)
  local tok = rw_token(us)
  local x = now + lease
  rw_w, rw_wt, rw_wc, rw_wexp, rw_wg, rw_mode = owner, tok, '1', fmt(x), wid or '', 'write'
  redis.call('hset', KEYS[1], 'w', owner, 'wt', tok, 'wc', 1, 'wexp', rw_wexp, 'wg', rw_wg, 'mode', 'write', 'tok', tok)
  rw_keep(x)
  if wid then
    local cid, n = string.match(wid, '^([^%s%.]+)%.(%S+)$')
    redis.call('publish', wch .. cid, n .. ' ' .. tok .. ' ' .. fmt(us))
  end
  return tok
end

-- rw_end_writer ends the writer's hold (rw_release, rw_leave, force_rw):
-- it is forgotten at once, and its fields deleted by rw_drop_writer, after
-- the hand-on, unless the hand-on wrote a new writer over them.
local function rw_end_writer()
  rw_load()
  rw_w = nil
end

local function rw_drop_writer()
  if not rw_w then
    redis.call('hdel', KEYS[1], 'w', 'wt', 'wc', 'wexp', 'wg')
  end
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

-- rw_wait_reader registers reader member m as waiting for the next write
-- release, its place ending at x.
local function rw_wait_reader(m, x)
  rw_load()
  if redis.call('zadd', KEYS[5], x, m) == 1 then
    if rw_rq == '0' then
      rw_rq = '1'
      redis.call('hset', KEYS[1], 'rq', '1')
    end
    rw_keep(x, KEYS[5])
  else
    rw_keep(x)
  end
end

-- rw_unwait_reader takes reader member m out of the waiting readers, if
-- any may wait.
local function rw_unwait_reader(m)
  rw_load()
  if rw_rq ~= '0' then
    redis.call('zrem', KEYS[5], m)
  end
end

-- rw_grant_readers grants a read hold to every reader that waits (place
-- live) and tells each; a reader whose owner already reads is only told to
-- look again (it re-enters). It reports whether it granted any.
local function rw_grant_readers(now, us, wch)
  rw_load()
  if rw_rq == '0' then
    return false
  end
  local rs = redis.call('zrangebyscore', KEYS[5], '(' .. now, '+inf')
  redis.call('del', KEYS[5])
  local tok = nil
  for _, m in ipairs(rs) do
    local o, wid, cid, n, ls = parse_member(m)
    if redis.call('hexists', KEYS[1], 'r:' .. o) == 1 then
      redis.call('publish', wch .. cid, n)
    else
      tok = rw_token(us)
      rw_add_reader(o, '1 ' .. tok .. ' ' .. wid, now + tonumber(ls))
      redis.call('publish', wch .. cid, n .. ' ' .. tok .. ' ' .. fmt(us))
    end
  end
  local f = {}
  if rw_until then
    rw_rq = '0'
    f = {'rq', '0'}
  end
  if tok then
    f[#f + 1] = 'tok'
    f[#f + 1] = tok
    if rw_mode ~= 'read' then
      rw_mode = 'read'
      f[#f + 1] = 'mode'
      f[#f + 1] = 'read'
    end
  end
  if #f > 0 then
    redis.call('hset', KEYS[1], unpack(f))
  end
  return tok ~= nil
end

-- rw_member_of returns the writer-queue member of owner, if it is queued.
local function rw_member_of(owner)
  for _, m in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
    if string.sub(m, 1, #owner + 1) == owner .. ' ' then
      return m
    end
  end
end

-- rw_queue appends writer member m to the queue unless it is there, and
-- renews its place until x.
local function rw_queue(m, x)
  if redis.call('zadd', KEYS[4], x, m) == 1 then
    if redis.call('rpush', KEYS[3], m) == 1 then
      rw_keep(x, KEYS[4], KEYS[3])
    else
      rw_keep(x, KEYS[4])
    end
  else
    rw_keep(x)
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
    rw_set_mode('read')
    return
  end
  if readers_first and rw_grant_readers(now, us, wch) then
    return
  end
  if rw_grant_writer(now, us, wch) or rw_grant_readers(now, us, wch) then
    return
  end
  rw_set_mode(nil)
end
