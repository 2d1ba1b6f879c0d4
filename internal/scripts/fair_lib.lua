-- uses: lib
-- The prelude of the fair and rw scripts (see lib.lua).
--
-- A fair queue is a list of waiters in arrival order plus a sorted set that
-- gives each waiter's place a lease, scored by server time in ms. A waiter
-- renews its place each time it looks at the lock (its fallback, lease/3),
-- so a dead waiter drops out within one lease and a live one keeps its
-- place.

-- Attempt markers (see mutex_acquire.lua): undone(k) reports that the undo
-- of this attempt ran first; granted(k, lease, r) records a grant and
-- returns the reply r. When the last ARGV is "check", the marker is only
-- checked, never written: the owner was made for this one call, and its
-- undo releases whatever the owner holds (mutex_undo_fresh.lua).
local function undone(k)
  return k ~= nil and redis.call('exists', k) == 1
end

local function granted(k, lease, r)
  if k and ARGV[#ARGV] ~= 'check' then
    redis.call('set', k, '1', 'px', lease)
  end
  return r
end

-- FIFO grants (the fair mutex). A queue member is "<owner> <wid> <lease
-- ms>": wid ("<client id>.<n>") names one wait of one Client, which is woken
-- on the channel prefix .. client id, a channel the Client subscribes once
-- for all its waits on the lock. A release does not wake the head to try
-- again: it makes the head the holder, "<owner> <token> 1 <wid> <last>",
-- with the head's lease, and publishes "<n> <token> <µs>", µs the server
-- time of the grant: the lease runs from then, and the grantee maps it to
-- its own clock through the server time of its last attempt's reply (the
-- third value of {0, ms, µs}), so that its lease clock starts no later
-- than the lease did in Redis, however late the message came after that
-- attempt. The wid stays in the value so that the waiter can claim its grant with an attempt if the
-- message was lost, and so that a wait that ends leaves nothing
-- (fair_leave.lua); last, the token before, makes a retried release of
-- that token a no-op as the free marker does.

local function parse_member(m)
  return string.match(m, '^(%S+) (([^%s%.]+)%.(%S+)) (%d+)$')
end

-- parse_value splits a lock value: owner, token, count, the rest (" <wid>
-- <last>" after a grant, else ""), the wid of a grant (or "") and last.
local function parse_value(v)
  local o, t, c, rest = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
  local g, last = string.match(rest, '^ (%S+) (%d+)$')
  return o, t, tonumber(c), rest, g or '', last
end

-- live_head drops dead members from the head of queue q (their place in z
-- lapsed by now, or is gone) and returns the first live one, or nil.
local function live_head(q, z, now)
  local m = redis.call('lindex', q, 0)
  while m do
    local s = redis.call('zscore', z, m)
    if s and tonumber(s) > now then
      return m
    end
    redis.call('lpop', q)
    if s then
      redis.call('zrem', z, m)
    end
    m = redis.call('lindex', q, 0)
  end
  return nil
end

-- grant_next makes the first live member of the queue the holder of lock
-- k with the token after last, and tells its Client. It returns the token,
-- or nil when nobody waits.
local function grant_next(k, q, z, last, now, us, wch)
  local m = redis.call('lpop', q)
  while m do
    local s = redis.call('zscore', z, m)
    if s then
      redis.call('zrem', z, m)
      if tonumber(s) > now then
        local o, wid, cid, n, ls = parse_member(m)
        local tok = next_token(last, us)
        redis.call('set', k, o .. ' ' .. fmt(tok) .. ' 1 ' .. wid .. ' ' .. fmt(last), 'px', ls)
        redis.call('publish', wch .. cid, n .. ' ' .. fmt(tok) .. ' ' .. fmt(us))
        return tok
      end
    end
    m = redis.call('lpop', q)
  end
  return nil
end

-- queue_member appends member m to queue q unless it is there and renews
-- its place in z until now+lease. The queue keys are given two leases to
-- live, both at once, when this call created one of them or less than one
-- lease is left (one PTTL of z tells: q got its lifetime with z's), so a
-- call that renews a place or queues behind others rarely sets them.
local function queue_member(q, z, m, now, lease)
  local new = false
  if redis.call('zadd', z, now + lease, m) == 1 then
    new = redis.call('rpush', q, m) == 1
  end
  if new or redis.call('pttl', z) < lease then -- -1: this call created z
    redis.call('pexpire', q, 2 * lease)
    redis.call('pexpire', z, 2 * lease)
  end
end

-- release_one takes one count of the hold in value parts (o, t, c, rest)
-- of lock k: the last count grants the lock to the next waiter, or leaves
-- the free marker "- <token> 0" for free_ms. It returns 1 released, 2
-- still held.
local function release_one(k, q, z, o, t, c, rest, free_ms, wch)
  if c > 1 then
    redis.call('set', k, o .. ' ' .. t .. ' ' .. (c - 1) .. rest, 'keepttl')
    return 2
  end
  local now, us = server_now()
  if not grant_next(k, q, z, tonumber(t), now, us, wch) then
    redis.call('set', k, '- ' .. t .. ' 0', 'px', free_ms)
  end
  return 1
end
