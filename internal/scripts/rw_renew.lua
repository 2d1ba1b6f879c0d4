-- uses: lib fair_lib rw_lib
-- Extend the lease of one hold of an rw mutex, only if that hold is still
-- this owner's: each reader renews its own lease and no other, so a dead
-- reader's hold lapses even while live readers renew theirs.
--
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] token, ARGV[4] lease ms
-- Reply: 1 renewed, 0 the hold is gone.
local now = server_now()
local owner, lease = ARGV[2], tonumber(ARGV[4])
if ARGV[1] == 'read' then
  local r = redis.call('hget', KEYS[1], 'r:' .. owner)
  local s = tonumber(redis.call('zscore', KEYS[2], owner) or '0')
  if not r or string.match(r, '^%d+ (%d+)') ~= ARGV[3] or s <= now then
    return 0
  end
  redis.call('zadd', KEYS[2], math.max(s, now + lease), owner)
  rw_keep(lease, true)
  return 1
end
local w = redis.call('hmget', KEYS[1], 'w', 'wt', 'wexp')
if w[1] ~= owner or w[2] ~= ARGV[3] or tonumber(w[3]) <= now then
  return 0
end
redis.call('hset', KEYS[1], 'wexp', fmt(math.max(tonumber(w[3]), now + lease)))
rw_keep(lease, false)
return 1
