-- uses: lib
-- The prelude of the Group scripts (see lib.lua). One key of
-- a Group is a run record (see once_begin.lua) that goes away when the last
-- caller waiting for it has its result.
--
-- KEYS[1] state hash: tok (last token), and once a run ended: done "1", val
-- (the JSON result, or the leader's error message when err is "1"), until
-- (ms: keep the result at least until then, WithResultTTL)
-- KEYS[2] run key "<owner> <token> <call>", alive while the runner's lease
-- lasts; KEYS[3] undone zset (once_undo.lua); KEYS[4] wakeup channel
-- KEYS[5] waiters zset: call -> when its place lapses (ms); a waiting call
-- renews it at every look, so a dead process's calls drop out in a lease
-- KEYS[6] the Group's index zset: key -> until when its record may live
-- (ms), for Client.Inspect

local now, now_us = server_now()

-- live_waiters drops the lapsed waiters and counts the others.
local function live_waiters()
  redis.call('zremrangebyscore', KEYS[5], '-inf', now)
  return redis.call('zcard', KEYS[5])
end

-- keep makes k live at least ms more.
local function keep(k, ms)
  if redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end

-- list records the key gkey in the index until now+ms.
local function list(gkey, ms)
  redis.call('zremrangebyscore', KEYS[6], '-inf', now)
  local s = tonumber(redis.call('zscore', KEYS[6], gkey) or '0')
  if s < now + ms then
    redis.call('zadd', KEYS[6], now + ms, gkey)
  end
  keep(KEYS[6], ms)
end

-- drop removes the record of gkey (no run may be in progress).
local function drop(gkey)
  redis.call('del', KEYS[1], KEYS[5])
  redis.call('zrem', KEYS[6], gkey)
end

-- settle drops a finished record once nobody waits for it and its
-- WithResultTTL has passed.
local function settle(gkey)
  if live_waiters() > 0 then
    return
  end
  if tonumber(redis.call('hget', KEYS[1], 'until') or '0') > now then
    return
  end
  drop(gkey)
end
