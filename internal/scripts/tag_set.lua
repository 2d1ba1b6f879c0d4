-- uses: lib
-- Write or renew a hold's tag (see dsync's Observer.HoldTag), and prune
-- the tags of holds that ended without removing theirs (a crashed holder).
-- Each field carries its own expiry: a tag lives one lease from its last
-- write, and every write (a new hold's tag, a renewal round's) drops the
-- expired fields and sets the hash to live as long as its latest field, so
-- no tag outlives its hold's end by more than one lease and no live hold
-- extends another's.
--
-- KEYS[1] the lock's tag hash (owner in Redis -> "<expiry ms> <tag>")
-- ARGV[1] owner, ARGV[2] tag, ARGV[3] lifetime in ms, ARGV[4] "set", or
-- "renew" (only if the field still holds this tag)
-- Reply: 1 written, 0 not (a renewal of a tag no longer there).
local now = server_now()
local exp = now + tonumber(ARGV[3])
local keep = 0
local mine = false
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  local e, t = string.match(all[i + 1], '^(%d+) (.*)$')
  e = tonumber(e or '0')
  if e <= now then
    redis.call('hdel', KEYS[1], all[i])
  elseif all[i] == ARGV[1] then
    mine = t == ARGV[2]
  elseif e > keep then
    keep = e
  end
end
local wrote = 0
if ARGV[4] == 'set' or mine then
  redis.call('hset', KEYS[1], ARGV[1], fmt(exp) .. ' ' .. ARGV[2])
  wrote = 1
  keep = math.max(keep, exp)
elseif redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  -- Another tag of the same owner in Redis (a later hold's): it stays.
  local e = string.match(redis.call('hget', KEYS[1], ARGV[1]), '^(%d+) ')
  keep = math.max(keep, tonumber(e or '0'))
end
if keep > now then
  redis.call('pexpire', KEYS[1], keep - now)
end
return wrote
