-- uses: lib
-- The prelude of the Cond scripts (see lib.lua).
--
-- KEYS[1] waiters zset: waiter -> arrival (server µs, strictly growing)
-- KEYS[2] places zset: waiter -> when its place lapses (ms); a live waiter
-- renews it at every look (at least every lease/3), as in a fair queue
-- KEYS[3] signalled set: waiters woken and not yet gone
-- A waiter is "<client id>-<n>"; its wakeup channel is KEYS[1] ..
-- ":ch:<client id>", one per Client, and the message is the waiter.

local now, now_us = server_now()

local function keep(k, ms)
  if redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end

-- keep_all keeps the Cond's keys at least a lease more (a live waiter's
-- look), so a signal waiting for a dead waiter's place to lapse stays.
local function keep_all(lease)
  for i = 1, 3 do
    if redis.call('exists', KEYS[i]) == 1 then
      keep(KEYS[i], lease)
    end
  end
end

-- wake_one signals the longest-waiting live waiter; the dead ones before
-- it (their place lapsed) are dropped. It returns 1 if one was woken.
local function wake_one()
  while true do
    local head = redis.call('zrange', KEYS[1], 0, 0)[1]
    if not head then
      return 0
    end
    redis.call('zrem', KEYS[1], head)
    local s = redis.call('zscore', KEYS[2], head)
    if s and tonumber(s) > now then
      redis.call('sadd', KEYS[3], head)
      -- As long as the places: a live waiter keeps them all (keep_all).
      keep(KEYS[3], redis.call('pttl', KEYS[2]))
      redis.call('publish', KEYS[1] .. ':ch:' .. string.match(head, '^([^-]*)-'), head)
      return 1
    end
    redis.call('zrem', KEYS[2], head)
  end
end

-- prune drops the waiters whose place lapsed: their process died. One
-- that had been signalled passes its signal on, so no signal is lost.
local function prune()
  local dead = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'limit', 0, 100)
  for _, w in ipairs(dead) do
    redis.call('zrem', KEYS[2], w)
    redis.call('zrem', KEYS[1], w)
    if redis.call('srem', KEYS[3], w) == 1 then
      wake_one()
    end
  end
end
