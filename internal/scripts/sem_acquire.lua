-- uses: lib sem_common
-- Acquire n permits for an owner, or queue (or refresh) the waiter's place.
--
-- ARGV[1] owner, ARGV[2] waiter id, ARGV[3] n, ARGV[4] size,
-- ARGV[5] hold lease ms, ARGV[6] "try" or "wait", ARGV[7] channel prefix,
-- ARGV[8] queue place lease ms, ARGV[9] "first" on the call's first
-- attempt
-- Reply: {1, token} acquired (the acquisition is "<owner> <token>
-- <waiter>"), or granted to this waiter by a release whose message it has
-- not seen; {0, ms} not acquired (queued unless "try"), ms is when to look
-- again at the latest (a holder's lease may lapse then); {-1, size} the
-- semaphore exists with another size.
local now, now_us = server_now()
local stored = read_meta()
-- The undo writes undone before it marks a waiter: without it (a new
-- semaphore, or keys older than the field) the marks are looked up.
if (not meta_undone or meta_undone > now) and redis.call('zscore', KEYS[7], ARGV[2]) then
  return {0, 1} -- the caller gave up and undid this attempt: do nothing
end
local size = tonumber(ARGV[4])
if stored and tonumber(stored) ~= size then
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
local n = tonumber(ARGV[3])
local pruned = prune(now, true)
local free = size - used()
if free >= n then
  -- Lapsed queue places matter only to an acquire that may pass the
  -- queue (grant skips the ones it meets).
  pruned = prune_places(now) or pruned
end
-- A first attempt cannot have been queued or granted yet.
local rec = ARGV[9] ~= 'first' and redis.call('hget', KEYS[5], ARGV[2])
local ticket
if rec then
  local g = string.match(rec, '^g (%d+)$')
  if g then
    local member = ARGV[1] .. ' ' .. g .. ' ' .. ARGV[2]
    local exp = redis.call('zscore', KEYS[2], member)
    if exp then
      -- The claim's lease starts now: the caller counts it from this
      -- attempt's send time, which may be long after the grant.
      local upto = math.max(tonumber(exp), now + tonumber(ARGV[5]))
      redis.call('zadd', KEYS[2], upto, member)
      touch(now, {}, upto)
      return {1, tonumber(g)}
    end
    redis.call('hdel', KEYS[5], ARGV[2]) -- the grant is gone (forced)
    rec = nil
  else
    ticket = redis.call('zscore', KEYS[4], ARGV[2])
  end
end
local ahead
if free >= n then
  if ticket then
    ahead = redis.call('zrangebyscore', KEYS[4], '-inf', '(' .. ticket, 'limit', 0, free + 1)
  else
    ahead = redis.call('zrange', KEYS[4], 0, free)
  end
end
if ahead and fits(ahead, free, n) then
  if ticket then
    drop_waiter(ARGV[2])
  end
  local expiry = now + tonumber(ARGV[5])
  local stok = sem_token(now_us, expiry)
  local member = ARGV[1] .. ' ' .. stok .. ' ' .. ARGV[2]
  local created = {}
  if redis.call('exists', KEYS[2], KEYS[3]) < 2 then
    created = {2, 3}
  end
  redis.call('hset', KEYS[3], member, n)
  redis.call('zadd', KEYS[2], expiry, member)
  if pruned then
    expiry = math.max(expiry, (grant(ARGV[7], now, now_us, size)))
  end
  touch(now, created, expiry, not stored)
  return {1, tonumber(stok)}
end
local created, upto = {}, now
if ARGV[6] == 'wait' then
  if not ticket then
    if redis.call('exists', KEYS[4], KEYS[5]) < 2 then
      created = {4, 5} -- the queue's keys: it was empty
    end
    local seq = redis.call('hincrby', KEYS[1], 'seq', 1)
    redis.call('zadd', KEYS[4], seq, ARGV[2])
  end
  upto = now + tonumber(ARGV[8])
  redis.call('hset', KEYS[5], ARGV[2], ARGV[3] .. ' ' .. ARGV[1] .. ' ' .. ARGV[5] .. ' ' .. fmt(upto))
end
if pruned then
  local u, made = grant(ARGV[7], now, now_us, size)
  upto = math.max(upto, u)
  for _, i in ipairs(made) do
    created[#created + 1] = i
  end
end
touch(now, created, upto, not stored)
-- The earliest lease to lapse may free permits without anyone publishing:
-- next is no later than that (prune), and later than now.
local hint = tonumber(ARGV[8])
if meta_next and meta_next < NEVER then
  hint = math.max(meta_next - now + 1, 1)
end
return {0, hint}
