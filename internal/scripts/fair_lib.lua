-- Shared prelude of the fair and rw scripts (prepended to each in Go).
--
-- A fair queue is a list of waiters in arrival order plus a sorted set that
-- gives each waiter's place a lease, scored by server time in ms. A waiter
-- renews its place each time it looks at the lock, so a dead waiter drops
-- out within one lease and a live one keeps its place.

-- server_now returns the server clock in ms and in µs.
local function server_now()
  local t = redis.call('time')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- prune_queue drops the waiters of list q whose place in zset z lapsed by
-- now, and any entry of q without a place (it can never be renewed).
local function prune_queue(q, z, now)
  local dead = redis.call('zrangebyscore', z, '-inf', now)
  for _, w in ipairs(dead) do
    redis.call('lrem', q, 0, w)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', z, '-inf', now)
  end
  local head = redis.call('lindex', q, 0)
  while head and not redis.call('zscore', z, head) do
    redis.call('lpop', q)
    head = redis.call('lindex', q, 0)
  end
  return head
end

-- enqueue appends w to the queue unless it is there, and renews its place
-- until now+lease; the queue keys outlive their last waiter by a lease.
local function enqueue(q, z, w, now, lease)
  if not redis.call('zscore', z, w) then
    redis.call('rpush', q, w)
  end
  redis.call('zadd', z, now + lease, w)
  for _, k in ipairs({q, z}) do
    if redis.call('pttl', k) < lease then
      redis.call('pexpire', k, lease)
    end
  end
end

-- place_left is how long the place of waiter w has left, in ms (at least 1).
local function place_left(z, w, now)
  local s = redis.call('zscore', z, w)
  if not s then
    return 1
  end
  return math.max(tonumber(s) - now, 1)
end

local function fmt(n)
  return string.format('%.0f', n)
end

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
