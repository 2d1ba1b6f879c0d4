-- uses: lib sem_common
-- Release n permits of an owner and grant them to the waiters that now fit.
--
-- The permits come from the owner's acquisitions: the one with the given
-- token if it took n, else the latest one that took n, else the latest
-- ones, as many as n covers (the last of them in part). Client-side,
-- Semaphore.take ends the same holds.
--
-- ARGV[1] owner, ARGV[2] n, ARGV[3] channel prefix, ARGV[4] size,
-- ARGV[5] (optional) token of the acquisition to release first, or "0",
-- ARGV[6] (optional) "exact": the release is sent again after its reply
-- was lost, and releases the acquisition with that token, of n permits,
-- or nothing: the first may have released it, and another of the owner
-- must not go in its place
-- Reply: {1, left} released, left permits still held by the owner;
-- {0, held} the owner holds fewer than n (held), and nothing changed;
-- {2, held} exact, and that acquisition is gone (released, or its lease
-- lapsed), and nothing changed;
-- {-1, size} the semaphore exists with another size, and nothing changed.
local now, now_us = server_now()
local stored = read_meta()
if stored and stored ~= ARGV[4] and tonumber(stored) ~= tonumber(ARGV[4]) then
  return {-1, tonumber(stored)}
end
local live, inuse, dead = holders(now, ARGV[4])
local n, size = ARGV[2] + 0, ARGV[4] + 0 -- (strings made numbers)
local pref = ARGV[5] or '0'
-- The owner's acquisitions, each {member, token, permits, lease end}.
local mine, held = {}, 0
local prefix = ARGV[1] .. ' '
for _, h in ipairs(live) do
  if string.sub(h[1], 1, #prefix) == prefix then
    mine[#mine + 1] = {h[1], false, h[3], h[2]}
    held = held + h[3]
  end
end
local exact = ARGV[6] == 'exact'
if #mine > 1 or exact then
  for _, a in ipairs(mine) do
    a[2] = string.match(a[1], '^%S+ (%d+) ')
  end
end
local gone = false
if exact then
  gone = true
  for _, a in ipairs(mine) do
    if a[2] == pref and a[3] == n then
      gone = false
    end
  end
end
if held < n or gone then
  if dead and stored then
    -- A lapsed holder's permits came back: serve the queue.
    local _, upto, _, made = grant(ARGV[3], now, now_us, size - inuse, #live > 0)
    if upto > 0 then
      touch(now, made, upto)
    end
  end
  if gone then
    return {2, held}
  end
  return {0, held}
end
if #mine > 1 then
  table.sort(mine, function(a, b) return tonumber(a[2]) > tonumber(b[2]) end)
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
-- The grant comes first: the holders key still holds the released
-- acquisitions, so it creates no key that would need a lifetime.
local _, upto = grant(ARGV[3], now, now_us, size - inuse + n, true)
local left, zrem = n, {'zrem', KEYS[2]}
for _, a in ipairs(mine) do
  if left == 0 then
    break
  end
  zrem[#zrem + 1] = a[1]
  if a[3] > left then
    -- In part: the acquisition keeps its lease with fewer permits.
    redis.call('zadd', KEYS[2], fmt(a[4]), string.match(a[1], '^(.* )%d+$') .. fmt(a[3] - left))
    left = 0
  else
    left = left - a[3]
  end
end
redis.call(unpack(zrem))
if upto > 0 then
  touch(now, {}, upto)
end
return {1, held - n}
