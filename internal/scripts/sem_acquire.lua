-- uses: lib sem_common
-- Acquire n permits for an owner, or queue (or refresh) the waiter's place.
--
-- ARGV[1] owner, ARGV[2] waiter id, ARGV[3] n, ARGV[4] size,
-- ARGV[5] hold lease ms, ARGV[6] "try" or "wait", ARGV[7] channel prefix,
-- ARGV[8] queue place lease ms, ARGV[9] "first" on the call's first
-- attempt
-- Reply: {1, token} acquired (the acquisition is "<owner> <token> <waiter>
-- <n>"), or granted to this waiter by a release whose message it has not
-- seen; {0, ms, µs} not acquired (queued unless "try"), ms is when to look
-- again at the latest (a holder's lease may lapse then), µs the server
-- time now, against which a grant's time is read (fair_lib.lua); {-1, size} the
-- semaphore exists with another size.
local now, now_us = server_now()
local stored = read_meta()
-- The undo writes undone before it marks a waiter: without it (a new
-- semaphore) the marks are looked up.
local w = ARGV[2]
if (not meta_undone or meta_undone > now) and redis.call('zscore', KEYS[5], w) then
  return {0, 1} -- the caller gave up and undid this attempt: do nothing
end
if stored and stored ~= ARGV[4] and tonumber(stored) ~= tonumber(ARGV[4]) then
  return {-1, tonumber(stored)}
end
if not stored then
  if meta_undone then
    redis.call('hset', KEYS[1], 'size', ARGV[4])
  else
    meta_undone = 0
    redis.call('hset', KEYS[1], 'size', ARGV[4], 'undone', '0')
  end
end
local live, inuse, dead = holders(now, ARGV[4])
local queued = false
-- A first attempt cannot have been queued or granted yet.
if ARGV[9] ~= 'first' then
  for _, h in ipairs(live) do
    local o, t, hw = string.match(h[1], '^(%S+) (%d+) (%S+) ')
    if hw == w and o == ARGV[1] then
      -- Granted by a release whose message was lost. The claim's lease
      -- starts now: the caller counts it from this attempt's send time,
      -- which may be long after the grant.
      local upto = math.max(h[2], now + tonumber(ARGV[5]))
      redis.call('zadd', KEYS[2], fmt(upto), h[1])
      touch(now, {}, upto, false, live[#live][2])
      return {1, tonumber(t)}
    end
  end
  queued = redis.call('hexists', KEYS[4], w) == 1
end
local n = ARGV[3] + 0 -- (strings made numbers)
local free = ARGV[4] - inuse
local place = now + ARGV[8]
local rec = ARGV[3] .. ' ' .. ARGV[1] .. ' ' .. ARGV[5] .. ' ' .. fmt(place)
if queued then
  redis.call('hset', KEYS[4], w, rec) -- the place stays, its lease renewed
end
local empty, upto, created, got = false, 0, {}, {}
-- Free permits the queue's head did not get (a lapsed holder, or more
-- free than it wants, or a waiter gone ahead of us): serve the queue
-- first, this waiter among them if it is queued.
if free > 0 and (dead or queued or free >= n) then
  free, upto, empty, created, got = grant(ARGV[7], now, now_us, free, #live > 0, w)
  if got[w] then
    touch(now, created, upto)
    return {1, tonumber(got[w])}
  end
end
if not queued and empty and free >= n then
  local expiry = now + ARGV[5]
  local tok = sem_token(now_us)
  if #live == 0 and #created == 0 then
    created = {KEYS[2]}
  end
  redis.call('zadd', KEYS[2], fmt(expiry), ARGV[1] .. ' ' .. tok .. ' ' .. w .. ' ' .. ARGV[3])
  redis.call('hset', KEYS[1], 'tok', tok)
  touch(now, created, math.max(expiry, upto), not stored, live[#live] and live[#live][2])
  return {1, tonumber(tok)}
end
if ARGV[6] == 'wait' then
  if not queued then
    if redis.call('rpush', KEYS[3], w) == 1 then
      -- The queue was empty: its keys are new.
      created[#created + 1] = KEYS[3]
      created[#created + 1] = KEYS[4]
    end
    redis.call('hset', KEYS[4], w, rec)
  end
  upto = math.max(upto, place)
end
touch(now, created, upto, not stored, live[#live] and live[#live][2])
-- The earliest lease to lapse may free permits without anyone publishing.
if live[1] then
  return {0, math.max(live[1][2] - now + 1, 1), now_us}
end
return {0, tonumber(ARGV[8]), now_us}
