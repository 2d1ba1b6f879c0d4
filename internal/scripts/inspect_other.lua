-- uses: lib
-- Read an RWMutex, Semaphore, Once or WaitGroup in one atomic step, for
-- Client.Inspect. It only reads: lapsed holders and waiters are skipped,
-- not pruned.
--
-- ARGV[1] layout: "rw", "sem", "once" or "wg"; ARGV[2] the most waiters.
-- KEYS, by layout (see the primitive's scripts):
--   rw:   lock hash, reader leases zset, writer queue list, queue places zset
--   sem:  meta hash, holders zset, queue list, want hash
--   once: state hash, run key
--   wg:   counter
--   group: state hash, run key, waiters zset (one key of a Group)
--   cond: waiters zset (arrival), places zset, signalled set
-- Reply (strings): {found, last token, mode, size, free, done, counter,
-- holders, then per holder owner, count, token, lease ms, permits, then per
-- waiter owner, place ms, permits wanted}. Unknown numbers are "-1".
local now = server_now()
local layout, maxw = ARGV[1], tonumber(ARGV[2])
local found, tok, mode, size, free, done, counter = 0, '0', '', '-1', '-1', '-1', '-1'
local holders, waiters = {}, {}
local function holder(o, c, tk, left, n)
  for _, v in ipairs({o, fmt(c), fmt(tk), fmt(left), fmt(n)}) do holders[#holders + 1] = v end
end
local function waiter(o, left, n)
  for _, v in ipairs({o, fmt(left), fmt(n)}) do waiters[#waiters + 1] = v end
end
-- queue reads the live waiters of a list q with places in zset z.
local function queue(q, z, want)
  for _, w in ipairs(redis.call('lrange', q, 0, maxw - 1)) do
    local s = redis.call('zscore', z, w)
    -- A member is "<owner> <wid> <lease>" (fair_lib.lua).
    if s and tonumber(s) > now then waiter(string.match(w, '^%S+'), tonumber(s) - now, want) end
  end
end
-- run reads a Once's state hash and run record (a Group key's too).
local function run()
  tok = redis.call('hget', KEYS[1], 'tok') or '0'
  done = redis.call('hget', KEYS[1], 'done') and '1' or '0'
  local v = redis.call('get', KEYS[2])
  if v then
    local o, tk = string.match(v, '^(%S+) (%d+)')
    if o then holder(o, 1, tk, redis.call('pttl', KEYS[2]), 1) end
  end
end

if layout == 'rw' then
  found = redis.call('exists', KEYS[1], KEYS[2], KEYS[3])
  tok = redis.call('hget', KEYS[1], 'tok') or '0'
  local w = redis.call('hget', KEYS[1], 'w')
  local wexp = tonumber(redis.call('hget', KEYS[1], 'wexp') or '0')
  if w and wexp > now then
    mode = 'write'
    holder(w, redis.call('hget', KEYS[1], 'wc') or '1', redis.call('hget', KEYS[1], 'wt') or '0', wexp - now, 1)
  end
  local rs = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf', 'withscores')
  for i = 1, #rs, 2 do
    local v = redis.call('hget', KEYS[1], 'r:' .. rs[i]) or '1 0'
    local c, tk = string.match(v, '^(%d+) (%d+)')
    holder(rs[i], c or 1, tk or 0, tonumber(rs[i + 1]) - now, 1)
    if mode == '' then mode = 'read' end
  end
  queue(KEYS[3], KEYS[4], 1)
elseif layout == 'sem' then
  found = redis.call('exists', KEYS[1])
  tok = redis.call('hget', KEYS[1], 'tok') or '0'
  local sz = tonumber(redis.call('hget', KEYS[1], 'size') or '-1')
  local used = 0
  local hs = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf', 'withscores')
  for i = 1, #hs, 2 do
    -- One holder per acquisition "<owner> <token> <waiter> <permits>".
    local o, tk, n = string.match(hs[i], '^(%S+) (%d+) %S+ (%d+)$')
    n = tonumber(n or '0')
    used = used + n
    holder(o or hs[i], 0, tk or 0, tonumber(hs[i + 1]) - now, n)
  end
  size = fmt(sz)
  if sz >= 0 then free = fmt(math.max(sz - used, 0)) end
  for _, w in ipairs(redis.call('lrange', KEYS[3], 0, maxw - 1)) do
    -- The record is "<permits> <owner> <lease> <place expiry>".
    local n, o, _, p = string.match(redis.call('hget', KEYS[4], w) or '', '^(%d+) (%S+) (%d+) (%d+)$')
    if n and tonumber(p) > now then
      waiter(o, tonumber(p) - now, n)
    end
  end
elseif layout == 'once' then
  found = redis.call('exists', KEYS[1], KEYS[2])
  run()
elseif layout == 'group' then
  found = redis.call('exists', KEYS[1], KEYS[2], KEYS[3])
  run()
  local ws = redis.call('zrangebyscore', KEYS[3], '(' .. now, '+inf', 'withscores', 'limit', 0, maxw)
  for i = 1, #ws, 2 do waiter(ws[i], tonumber(ws[i + 1]) - now, 1) end
elseif layout == 'cond' then
  found = redis.call('exists', KEYS[1], KEYS[3])
  for _, w in ipairs(redis.call('zrange', KEYS[1], 0, maxw - 1)) do
    local s = redis.call('zscore', KEYS[2], w)
    if s and tonumber(s) > now then waiter(w, tonumber(s) - now, 1) end
  end
elseif layout == 'wg' then
  local v = redis.call('get', KEYS[1])
  if v then
    found, counter = 1, v
  end
else
  return redis.error_reply('unknown layout ' .. layout)
end
local out = {tostring(found), tok, mode, size, free, done, counter, tostring(#holders / 5)}
for _, v in ipairs(holders) do out[#out + 1] = v end
for _, v in ipairs(waiters) do out[#out + 1] = v end
return out
