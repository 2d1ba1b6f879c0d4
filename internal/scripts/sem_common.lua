-- uses: lib
-- The prelude of the semaphore scripts (see lib.lua).
--
-- KEYS[1] meta hash: size, tok (last fencing token), seq (last queue
--   ticket), until (when the keys expire, see touch), next (no holder's
--   lease ends before it, see prune), undone (no undone mark in KEYS[7]
--   outlives it, see sem_undo.lua)
-- KEYS[2] holders zset: acquisition -> lease expiry (server ms)
-- KEYS[3] permits hash: acquisition -> permits held
-- KEYS[4] queue zset: waiter -> ticket (arrival order)
-- KEYS[5] queue hash: waiter -> "<permits wanted> <owner> <lease ms>
--   <place expiry, server ms>" while it waits (its place lapses unless
--   renewed), "g <token>" once a release granted it, until that
--   acquisition ends
-- KEYS[6] unused (queue places lived here; the records hold them now)
-- KEYS[7] undone zset: waiter -> expiry, the attempts whose caller gave up
--   (sem_undo.lua): an acquire of one of them that arrives late is a no-op
-- An acquisition is "<owner> <token> <waiter>": each has its own lease, so
-- a later acquisition by the same owner never shortens an earlier one, and
-- the waiter id (one per Acquire call) lets an abandoned call be undone
-- exactly.
-- FIFO grants: a waiter id is "<client id>.<n>"; the scripts that free
-- permits (release, renew and undo through prune, acquire through prune)
-- make the waiters at the head of the queue whose permits fit holders, and
-- tell each on its Client's channel (prefix .. client id, subscribed once
-- by the Client) with "<n> <token>". The grantee runs no acquire script;
-- if the message is lost, its next attempt finds the "g <token>" record.
-- Every script first drops expired holders, so the permits of a dead owner
-- come back within one lease, whoever touches the semaphore next; the
-- acquire script drops lapsed queue places too (grant skips the ones it
-- meets).

-- meta_tok, meta_until, meta_next and meta_undone cache fields of the
-- meta hash (read_meta, or sem_token for tok and next), so that no script
-- reads them twice; next_known: next was read (nil then means absent).
local meta_tok, meta_until, meta_next, meta_undone, next_known

-- NEVER is the next of a semaphore without holders.
local NEVER = 9000000000000000

-- read_meta returns the stored size (or nil) and remembers the rest.
local function read_meta()
  local m = redis.call('hmget', KEYS[1], 'size', 'tok', 'until', 'next', 'undone')
  meta_tok, meta_until = tonumber(m[2] or '0'), tonumber(m[3])
  meta_next, meta_undone, next_known = tonumber(m[4]), tonumber(m[5]), true
  return m[1]
end

-- prune drops the holders whose lease lapsed, and reports whether there
-- were any. The meta field next, when present, is no later than every
-- holder's lease end (each new holder lowers it, sem_token; renewals only
-- extend leases): before it nobody can have lapsed, and prune costs
-- nothing. Past it (or without it) prune looks, and with record (the meta
-- hash exists and was read) stores the earliest lease end left.
local function prune(now, record)
  if meta_next and meta_next > now then
    return false
  end
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('hdel', KEYS[3], o)
    redis.call('hdel', KEYS[5], string.match(o, ' (%S+)$')) -- a grant's record
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  end
  if record then
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    meta_next = tonumber(first[2]) or NEVER
    redis.call('hset', KEYS[1], 'next', fmt(meta_next))
  end
  return #dead > 0
end

-- waiting parses a waiter's record: permits, owner, lease and place
-- expiry, or nothing when it is not waiting (granted, or gone).
local function waiting(rec)
  local n, owner, lease, place = string.match(rec or '', '^(%d+) (%S+) (%d+) (%d+)$')
  if n then
    return tonumber(n), owner, lease, tonumber(place)
  end
end

-- drop_waiter takes waiter w out of the queue.
local function drop_waiter(w)
  redis.call('zrem', KEYS[4], w)
  redis.call('hdel', KEYS[5], w)
end

-- prune_places drops the waiters whose queue place lapsed, and reports
-- whether there were any. It reads every record: only an acquire that may
-- pass the queue (or an undo) needs it; grant skips the lapsed places it
-- meets.
local function prune_places(now)
  local gone = false
  local all = redis.call('hgetall', KEYS[5])
  for i = 1, #all, 2 do
    local n, _, _, place = waiting(all[i + 1])
    if n and place <= now then
      drop_waiter(all[i])
      gone = true
    end
  end
  return gone
end

-- acquisitions returns the live acquisitions of owner, latest first, each
-- {member, token, permits}, and the permits every holder uses.
local function acquisitions(owner)
  local mine, inuse = {}, 0
  local all = redis.call('hgetall', KEYS[3])
  for i = 1, #all, 2 do
    local o, t = string.match(all[i], '^(%S+) (%d+) ')
    inuse = inuse + tonumber(all[i + 1])
    if o == owner then
      mine[#mine + 1] = {all[i], tonumber(t), tonumber(all[i + 1])}
    end
  end
  table.sort(mine, function(a, b) return a[2] > b[2] end)
  return mine, inuse
end

local function used()
  local s = 0
  for _, v in ipairs(redis.call('hvals', KEYS[3])) do
    s = s + tonumber(v)
  end
  return s
end

-- fits reports whether `want` more permits fit after every waiter ahead
-- (the first `limit`+1 entries of `ahead`) got theirs: FIFO means a waiter is
-- served only if everyone ahead of it can be served too.
local function fits(ahead, free, want)
  local sum = 0
  for _, w in ipairs(ahead) do
    sum = sum + tonumber(string.match(redis.call('hget', KEYS[5], w) or '0', '^%d+'))
    if sum > free then
      return false
    end
  end
  return sum + want <= free
end

-- sem_token issues the next fencing token (next_token, lib.lua) for a new
-- holder whose lease ends at expiry, and stores it, lowering next to
-- expiry if that is earlier (prune).
local function sem_token(now_us, expiry)
  if not next_known then
    local m = redis.call('hmget', KEYS[1], 'tok', 'next')
    meta_tok, meta_next, next_known = tonumber(m[1] or '0'), tonumber(m[2]), true
  end
  meta_tok = next_token(meta_tok, now_us)
  local tok = fmt(meta_tok)
  if meta_next and expiry < meta_next then
    meta_next = expiry
    redis.call('hset', KEYS[1], 'tok', tok, 'next', fmt(expiry))
  else
    redis.call('hset', KEYS[1], 'tok', tok)
  end
  return tok
end

-- grant makes holders of the longest queue prefix whose permits fit now,
-- and nobody else (FIFO, no thundering herd), dropping dead waiters it
-- meets; each grantee's Client is told on its channel. It returns the
-- latest lease end it wrote (or 0) and the keys it may have created, for
-- touch. size and inuse (the permits held) are the semaphore's, or nil
-- when the caller does not know them; kept: the holder keys exist and
-- keep a holder through this call (a release that ends its holds after
-- the grant), so the grant creates no key.
local function grant(chprefix, now, now_us, size, inuse, kept)
  size = size or tonumber(redis.call('hget', KEYS[1], 'size') or '0')
  local free = size - (inuse or used())
  local upto, created = 0, {}
  if free <= 0 then
    return upto, created
  end
  -- Every waiter wants at least one permit, so at most `free` can fit.
  for _, w in ipairs(redis.call('zrange', KEYS[4], 0, free - 1)) do
    local n, owner, lease, place = waiting(redis.call('hget', KEYS[5], w))
    if n and place > now then
      if n > free then
        return upto, created
      end
      if not kept then
        created = {2, 3} -- they are gone whenever the last holder went
      end
      local expiry = now + tonumber(lease)
      local tok = sem_token(now_us, expiry)
      local member = owner .. ' ' .. tok .. ' ' .. w
      redis.call('hset', KEYS[3], member, n)
      redis.call('zadd', KEYS[2], expiry, member)
      redis.call('zrem', KEYS[4], w)
      redis.call('hset', KEYS[5], w, 'g ' .. tok)
      local cid, id = string.match(w, '^([^%.]+)%.(.+)$')
      if cid then
        redis.call('publish', chprefix .. cid, id .. ' ' .. tok)
      end
      free = free - n
      upto = math.max(upto, expiry)
    else
      drop_waiter(w)
    end
  end
  return upto, created
end

-- touch keeps the keys until an hour past the last lease or queue place,
-- so an abandoned semaphore does not stay in Redis forever. All keys are
-- given the same lifetime, recorded in the hash's field until (the hash's
-- PTTL where the caller did not read it): when the keys outlive upto (the
-- latest expiry this call wrote) by 50 minutes, it costs nothing, plus one
-- PEXPIRE NX for each key this call may have created
-- (the indexes in created) to give it the same lifetime; else (or with
-- all) every key is set.
local function touch(now, created, upto, all)
  if not all then
    local left
    if meta_until then
      left = meta_until - now
    else
      left = redis.call('pttl', KEYS[1])
    end
    if left > 0 and now + left >= (upto or now) + 3000000 then
      for _, i in ipairs(created) do
        redis.call('pexpire', KEYS[i], left, 'nx')
      end
      return
    end
  end
  local last = now
  local h = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
  if h[2] then last = math.max(last, tonumber(h[2])) end
  last = math.max(last, upto or now) -- queue places end within a lease: the hour covers them
  local ttl = fmt(last - now + 3600000)
  redis.call('hset', KEYS[1], 'until', fmt(last + 3600000))
  for i = 1, 7 do
    redis.call('pexpire', KEYS[i], ttl)
  end
end

