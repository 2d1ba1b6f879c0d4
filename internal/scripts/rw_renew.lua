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
  rw_load(owner)
  local r = rw_r
  local s = tonumber(redis.call('zscore', KEYS[2], owner) or '0')
  if not r or string.match(r, '^%d+ (%d+)') ~= ARGV[3] or s <= now then
    return 0
  end
  local x = math.max(s, now + lease)
  redis.call('zadd', KEYS[2], x, owner)
  rw_keep(x)
  return 1
end
rw_load()
if rw_w ~= owner or rw_wt ~= ARGV[3] or tonumber(rw_wexp) <= now then
  return 0
end
local x = math.max(tonumber(rw_wexp), now + lease)
redis.call('hset', KEYS[1], 'wexp', fmt(x))
rw_keep(x)
return 1
