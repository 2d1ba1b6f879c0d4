-- uses: lib
-- Read a mutex or fair mutex in one atomic step, for Client.Inspect.
--
-- KEYS[1] lock key ("<owner> <token> <count>", or "- <token> 0" when free);
-- for a fair mutex (ARGV[2] "queue") KEYS[2] the queue list and KEYS[3] the
-- queue places zset; for a mutex (ARGV[2] "waiting") KEYS[2] the waiting
-- hash "<client> <wait>" -> "<goroutines> <expiry ms>" (see
-- mutex_acquire.lua), reported per Client (the latest expiry and the
-- largest count among its waits' entries: an older wait's entry lasts
-- only until its end is recorded)
-- ARGV[1] the most waiters to report
-- Reply: {value or "", pttl, waiter, ms left of its place, count, ...}:
-- only waiters whose place has not lapsed, in queue order; a mutex's
-- waiters are its waiting Clients, each with its goroutines that wait.
local out = {redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1])}
if ARGV[2] == 'waiting' and out[1] ~= '' then
  -- A Mutex hold bound to a session: free if the session is gone
  -- (lib.lua), else its lease is the session's (its key's TTL is the
  -- backstop).
  local o, t, c, w = lock_parse(out[1])
  local s = o and c == 1 and lock_session(KEYS[1], w)
  if s then
    local pttl = redis.call('pttl', s)
    if pttl < 0 then
      out[1] = '- ' .. t .. ' 0'
    else
      out[2] = pttl
    end
  end
end
if not KEYS[2] then
  return out
end
local now = server_now()
local max = tonumber(ARGV[1])
if ARGV[2] == 'queue' then
  for _, w in ipairs(redis.call('lrange', KEYS[2], 0, max - 1)) do
    local s = redis.call('zscore', KEYS[3], w)
    if s and tonumber(s) > now then
      out[#out + 1] = w
      out[#out + 1] = tonumber(s) - now
      out[#out + 1] = 1
    end
  end
  return out
end
local all = redis.call('hgetall', KEYS[2])
local at = {} -- Client -> its index in out
for i = 1, #all, 2 do
  local n, e = string.match(all[i + 1], '^(%d+) (%d+)$')
  if n and tonumber(e) > now then
    local cl = string.match(all[i], '^%S+')
    local j = at[cl]
    if j then
      out[j + 1] = math.max(out[j + 1], tonumber(e) - now)
      out[j + 2] = math.max(out[j + 2], tonumber(n))
    elseif #out < 2 + 3 * max then
      at[cl] = #out + 1
      out[#out + 1] = cl
      out[#out + 1] = tonumber(e) - now
      out[#out + 1] = tonumber(n)
    end
  end
end
return out
