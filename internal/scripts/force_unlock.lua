-- uses: lib
-- Release a mutex or fair mutex whoever holds it: the operator's
-- "dsync unlock --force". The value becomes the free marker with the same
-- token, so fencing tokens keep growing; the holder finds its hold gone at
-- its next renewal and reports the lock lost.
--
-- KEYS[1] lock key, KEYS[2] queue list and KEYS[3] places zset (fair only)
-- ARGV[1] free-marker lifetime in ms, ARGV[2] release channel (mutex) or "",
-- ARGV[3] waiter channel prefix (fair) or ""
-- Reply: the owner that held it, or "" when it was not held.
local v = redis.call('get', KEYS[1])
if not v then
  return ''
end
local o, t = lock_parse(v)
if not o or o == '-' then
  return ''
end
redis.call('set', KEYS[1], '- ' .. t .. ' 0', 'px', ARGV[1])
if ARGV[2] ~= '' then
  redis.call('publish', ARGV[2], t)
end
if KEYS[2] and ARGV[3] ~= '' then
  -- Wake the first waiter whose place is live to look again: a member
  -- "<owner> <client id>.<n> <lease>" is woken by "<n>" on its Client's
  -- channel (fair_lib.lua).
  local now = server_now()
  for _, w in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
    local s = redis.call('zscore', KEYS[3], w)
    if s and tonumber(s) > now then
      local cid, n = string.match(w, '^%S+ ([^%s%.]+)%.(%S+) %d+$')
      if cid then
        redis.call('publish', ARGV[3] .. cid, n)
      end
      break
    end
  end
end
return o
