-- Shared prelude of the semaphore scripts (prepended by sem.go).
--
-- KEYS[1] meta hash: size, tok (last fencing token), seq (last queue ticket)
-- KEYS[2] holders zset: acquisition -> lease expiry (server ms)
-- KEYS[3] permits hash: acquisition -> permits held
-- KEYS[4] queue zset: waiter -> ticket (arrival order)
-- KEYS[5] queue hash: waiter -> permits wanted
-- KEYS[6] queue zset: waiter -> place expiry (server ms)
-- KEYS[7] undone zset: waiter -> expiry, the attempts whose caller gave up
--   (sem_undo.lua): an acquire of one of them that arrives late is a no-op
-- An acquisition is "<owner> <token> <waiter>": each has its own lease, so
-- a later acquisition by the same owner never shortens an earlier one, and
-- the waiter id (one per Acquire call) lets an abandoned call be undone
-- exactly.
-- Every script first drops expired owners and waiters, so the permits of a
-- dead owner come back within one lease, whoever touches the semaphore next.

-- now_ms reads the server clock once: in ms, and in µs (for tokens).
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- prune reports whether it removed anyone.
local function prune(now)
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('hdel', KEYS[3], o)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', KEYS[2], '-inf', now)
  end
  local gone = redis.call('zrangebyscore', KEYS[6], '-inf', now)
  for _, w in ipairs(gone) do
    redis.call('zrem', KEYS[4], w)
    redis.call('hdel', KEYS[5], w)
  end
  if #gone > 0 then
    redis.call('zremrangebyscore', KEYS[6], '-inf', now)
  end
  redis.call('zremrangebyscore', KEYS[7], '-inf', now)
  return #dead > 0 or #gone > 0
end

-- acquisitions returns the live acquisitions of owner, latest first, each
-- {member, token, permits}.
local function acquisitions(owner)
  local mine = {}
  local all = redis.call('hgetall', KEYS[3])
  for i = 1, #all, 2 do
    local o, t = string.match(all[i], '^(%S+) (%d+) ')
    if o == owner then
      mine[#mine + 1] = {all[i], tonumber(t), tonumber(all[i + 1])}
    end
  end
  table.sort(mine, function(a, b) return a[2] > b[2] end)
  return mine
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
    sum = sum + tonumber(redis.call('hget', KEYS[5], w) or '0')
    if sum > free then
      return false
    end
  end
  return sum + want <= free
end

-- wake publishes to each waiter of the longest queue prefix that fits now,
-- and to nobody else: no thundering herd. Each waiter's channel is its own.
local function wake(chprefix)
  local size = tonumber(redis.call('hget', KEYS[1], 'size') or '0')
  local free = size - used()
  if free <= 0 then
    return
  end
  -- Every waiter wants at least one permit, so at most `free` can fit.
  local q = redis.call('zrange', KEYS[4], 0, free - 1)
  local sum = 0
  for _, w in ipairs(q) do
    sum = sum + tonumber(redis.call('hget', KEYS[5], w) or '0')
    if sum > free then
      return
    end
    redis.call('publish', chprefix .. w, '1')
  end
end

-- touch keeps the keys until an hour past the last lease or queue place,
-- so an abandoned semaphore does not stay in Redis forever. All keys are
-- given the same lifetime, so the hash's tells them all: when this call
-- created no key (created false) and the keys outlive upto (the latest
-- expiry it wrote) by 50 minutes, it costs one PTTL; else every key is
-- set.
local function touch(now, created, upto)
  if not created then
    local left = redis.call('pttl', KEYS[1])
    if left > 0 and now + left >= (upto or now) + 3000000 then
      return
    end
  end
  local last = now
  local h = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
  if h[2] then last = math.max(last, tonumber(h[2])) end
  local q = redis.call('zrange', KEYS[6], -1, -1, 'withscores')
  if q[2] then last = math.max(last, tonumber(q[2])) end
  local ttl = string.format('%.0f', last - now + 3600000)
  for i = 1, 7 do
    redis.call('pexpire', KEYS[i], ttl)
  end
end

