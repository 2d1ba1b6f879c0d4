-- uses: lib sem_common
-- Release n permits of an owner and wake the waiters that now fit.
--
-- The permits come from the owner's acquisitions: the one with the given
-- token if it took n, else the latest one that took n, else the latest
-- ones, as many as n covers (the last of them in part). Client-side,
-- Semaphore.take ends the same holds.
--
-- ARGV[1] owner, ARGV[2] n, ARGV[3] channel prefix, ARGV[4] size,
-- ARGV[5] (optional) token of the acquisition to release first, or "0"
-- Reply: {1, left} released, left permits still held by the owner;
-- {0, held} the owner holds fewer than n (held), and nothing changed;
-- {-1, size} the semaphore exists with another size, and nothing changed.
local now, now_us = server_now()
local stored = read_meta()
if stored and tonumber(stored) ~= tonumber(ARGV[4]) then
  return {-1, tonumber(stored)}
end
-- stored is false, not nil, when the meta hash has no size (a Redis nil
-- reply): record only into a meta hash that exists, or prune would create
-- one without a lifetime.
local pruned = prune(now, stored ~= false and stored ~= nil)
local n = tonumber(ARGV[2])
local pref = tonumber(ARGV[5] or '0')
local mine, inuse = acquisitions(ARGV[1])
local held = 0
for _, a in ipairs(mine) do
  held = held + a[3]
end
if held < n then
  if pruned then
    local upto, made = grant(ARGV[3], now, now_us, tonumber(ARGV[4]), inuse)
    touch(now, made, upto)
  end
  return {0, held}
end
local pick
for _, a in ipairs(mine) do
  if a[3] == n and (not pick or a[2] == pref) then
    pick = a
  end
end
if pick then
  mine = {pick}
end
-- The grant comes first: the holder keys still hold the released
-- acquisitions, so it creates no key that would need a lifetime.
local upto, made = grant(ARGV[3], now, now_us, tonumber(ARGV[4]), inuse - n, true)
local left = n
for _, a in ipairs(mine) do
  if left == 0 then
    break
  end
  local d = math.min(a[3], left)
  if d == a[3] then
    redis.call('hdel', KEYS[3], a[1])
    redis.call('zrem', KEYS[2], a[1])
    redis.call('hdel', KEYS[5], string.match(a[1], ' (%S+)$')) -- a grant's record
  else
    redis.call('hincrby', KEYS[3], a[1], -d)
  end
  left = left - d
end
if upto > 0 then
  touch(now, made, upto)
end
return {1, held - n}
