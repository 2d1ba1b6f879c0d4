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
local now = now_ms()
local stored = redis.call('hget', KEYS[1], 'size')
if stored and tonumber(stored) ~= tonumber(ARGV[4]) then
  return {-1, tonumber(stored)}
end
local pruned = prune(now)
local n = tonumber(ARGV[2])
local pref = tonumber(ARGV[5] or '0')
local mine = acquisitions(ARGV[1])
local held = 0
for _, a in ipairs(mine) do
  held = held + a[3]
end
if held < n then
  if pruned then wake(ARGV[3]) end
  return {0, held}
end
local pick
for _, a in ipairs(mine) do
  if a[3] == n and (not pick or a[2] == pref) then
    pick = a
  end
end
local left = n
if pick then
  mine = {pick}
end
for _, a in ipairs(mine) do
  if left == 0 then
    break
  end
  local d = math.min(a[3], left)
  if d == a[3] then
    redis.call('hdel', KEYS[3], a[1])
    redis.call('zrem', KEYS[2], a[1])
  else
    redis.call('hincrby', KEYS[3], a[1], -d)
  end
  left = left - d
end
wake(ARGV[3])
return {1, held - n} -- it only removed: the keys' lifetimes stand
