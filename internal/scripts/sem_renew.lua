-- uses: lib sem_common
-- Extend the lease of one acquisition, if it is still held: each
-- acquisition has its own lease (sem_common.lua).
--
-- ARGV[1] acquisition "<owner> <token> <waiter> <permits>", ARGV[2] lease
-- ms, ARGV[3] channel prefix
-- Reply: 1 renewed, 0 the acquisition is gone (released, or its lease
-- lapsed).
local now, now_us = server_now()
local member = ARGV[1]
local exp = tonumber(redis.call('zscore', KEYS[2], member) or '0')
if exp <= now then
  -- Gone, lapsed, or released in part (its member then names fewer
  -- permits): look at every holder.
  local live, inuse, dead = holders(now)
  local prefix = string.match(member, '^(.* )%d+$') or member
  exp = 0
  for _, h in ipairs(live) do
    if string.sub(h[1], 1, #prefix) == prefix then
      member, exp = h[1], h[2]
    end
  end
  if exp == 0 then
    local stored = dead and read_meta()
    if stored then
      -- A lapsed holder's permits came back: serve the queue.
      local _, upto, _, made = grant(ARGV[3], now, now_us, tonumber(stored) - inuse, #live > 0)
      if upto > 0 then
        touch(now, made, upto)
      end
    end
    return 0
  end
end
local expiry = math.max(exp, now + tonumber(ARGV[2]))
redis.call('zadd', KEYS[2], fmt(expiry), member)
touch(now, {}, expiry)
return 1
