-- uses: lib
-- The prelude of the semaphore scripts (see lib.lua).
--
-- KEYS[1] meta hash: size, tok (last fencing token), until (when the keys
--   expire, see touch), undone (no undone mark in KEYS[5] outlives it, see
--   sem_undo.lua)
-- KEYS[2] holders zset: acquisition "<owner> <token> <waiter> <permits>"
--   -> lease expiry (server ms)
-- KEYS[3] queue list: the waiters, in arrival order
-- KEYS[4] want hash: waiter -> "<permits wanted> <owner> <lease ms>
--   <place expiry, server ms>", for exactly the waiters in the queue (its
--   place lapses unless renewed)
-- KEYS[5] undone zset: waiter -> expiry, the attempts whose caller gave up
--   (sem_undo.lua): an acquire of one of them that arrives late is a no-op
-- An acquisition has its own lease, so a later acquisition by the same
-- owner never shortens an earlier one, and the waiter id (one per Acquire
-- call) lets an abandoned call be undone exactly.
-- FIFO grants: a waiter id is "<client id>.<n>"; a script that frees
-- permits, or finds them free with the queue's head not served, makes the
-- waiters at the head of the queue whose permits fit holders, and tells
-- each on its Client's channel (prefix .. client id, subscribed once by
-- the Client) with "<n> <token> <µs>", µs the server time of the grant,
-- from which its lease runs (see fair_lib.lua). The grantee runs no acquire script; if
-- the message is lost, its next attempt finds its acquisition among the
-- holders.
-- Every script that counts permits reads the holders and drops the ones
-- whose lease lapsed, so the permits of a dead owner come back within one
-- lease, whoever touches the semaphore next; a grant drops the lapsed
-- queue places it meets.
--
-- Numbers go to redis.call as strings (fmt, or the strings read): Redis
-- spells a Lua number with printf's %.17g, several times a call's price.

-- meta_tok (spelled), meta_until and meta_undone cache fields of the
-- meta hash (read_meta), so that no script reads them twice.
local meta_tok, meta_until, meta_undone

-- read_meta returns the stored size (or false) and remembers the rest.
local function read_meta()
  local m = redis.call('hmget', KEYS[1], 'size', 'tok', 'until', 'undone')
  -- (strings made numbers; false when absent)
  meta_tok, meta_until, meta_undone = m[2] or '0', m[3] and m[3] + 0, m[4] and m[4] + 0
  return m[1]
end

-- sem_token mints the next fencing token (next_token, lib.lua) and returns
-- it spelled; the caller stores meta_tok.
local function sem_token(now_us)
  meta_tok = fmt(next_token(meta_tok, now_us)) -- (last + 1 makes it a number)
  return meta_tok
end

-- holders reads every acquisition: the live ones, {member, lease end,
-- permits} in lease order, and the permits they hold; it drops the lapsed
-- ones and reports whether there were any. With size 1 (ARGV of the
-- caller, or nil) every acquisition holds 1 permit: no member is parsed.
local function holders(now, size)
  local all = redis.call('zrange', KEYS[2], '0', '-1', 'withscores')
  local live, inuse, dead = {}, 0, false
  for i = 1, #all, 2 do
    local exp = all[i + 1] + 0 -- (a string made a number)
    if exp <= now then
      dead = true
    else
      local n = 1
      if size ~= '1' then
        n = tonumber(string.match(all[i], ' (%d+)$') or '0')
      end
      live[#live + 1] = {all[i], exp, n}
      inuse = inuse + n
    end
  end
  if dead then
    redis.call('zremrangebyscore', KEYS[2], '-inf', fmt(now))
  end
  return live, inuse, dead
end

-- grant makes holders of the longest queue prefix whose permits fit in
-- free, and nobody else (FIFO, no thundering herd), dropping the waiters
-- with a lapsed place it meets; it tells each grantee's Client on its
-- channel, but not the waiter me (the caller, told by its reply). exists:
-- the holders key exists. It returns the permits still free, the latest
-- lease end it wrote (or 0), whether it found the queue's end, the keys it
-- created, and the tokens it granted by waiter.
local function grant(chprefix, now, now_us, free, exists, me)
  local upto, empty, created, got = 0, false, {}, {}
  local zadd, drop = {'zadd', KEYS[2]}, {'hdel', KEYS[4]}
  while free > 0 do
    local asked = free
    local ws = redis.call('lpop', KEYS[3], free == 1 and '1' or fmt(free))
    if not ws then
      empty = true
      break
    end
    local recs = redis.call('hmget', KEYS[4], unpack(ws))
    for i, w in ipairs(ws) do
      local n, owner, lease, place = string.match(recs[i] or '', '^(%d+) (%S+) (%d+) (%d+)$')
      if n and place + 0 > now then -- (strings made numbers)
        local want = n + 0
        if want > free then
          -- The head does not fit: it and those behind it go back, in order.
          local back = {'lpush', KEYS[3]}
          for j = #ws, i, -1 do
            back[#back + 1] = ws[j]
          end
          redis.call(unpack(back))
          free = 0
          break
        end
        local expiry = now + lease -- (a string made a number)
        local tok = sem_token(now_us)
        zadd[#zadd + 1] = fmt(expiry)
        zadd[#zadd + 1] = owner .. ' ' .. tok .. ' ' .. w .. ' ' .. n
        got[w] = tok
        if w ~= me then
          local cid, id = string.match(w, '^([^%.]+)%.(.+)$')
          if cid then
            redis.call('publish', chprefix .. cid, id .. ' ' .. tok .. ' ' .. fmt(now_us))
          end
        end
        free = free - want
        upto = math.max(upto, expiry)
      end
      drop[#drop + 1] = w
    end
    if free > 0 and #ws < asked then
      empty = true
      break
    end
  end
  if #drop > 2 then
    redis.call(unpack(drop))
  end
  if #zadd > 2 then
    if not exists then
      created = {KEYS[2]}
    end
    redis.call(unpack(zadd))
    redis.call('hset', KEYS[1], 'tok', meta_tok)
  end
  return free, upto, empty, created, got
end

-- touch keeps the keys until an hour past the last lease or queue place,
-- so an abandoned semaphore does not stay in Redis forever. All keys are
-- given the same lifetime, recorded in the hash's field until (the hash's
-- PTTL where the caller did not read it): when the keys outlive upto (the
-- latest expiry this call wrote) by 50 minutes, it costs nothing, plus one
-- PEXPIRE NX for each key this call may have created (created) to give it
-- the same lifetime; else (or with all) every key is set, past last (the
-- latest lease end, when the caller knows it) as well.
local function touch(now, created, upto, all, last)
  if not all then
    local left
    if meta_until then
      left = meta_until - now
    else
      left = redis.call('pttl', KEYS[1])
    end
    if left > 0 and now + left >= upto + 3000000 then
      for _, k in ipairs(created) do
        redis.call('pexpire', k, fmt(left), 'nx')
      end
      return
    end
  end
  if not last then
    local h = redis.call('zrange', KEYS[2], '-1', '-1', 'withscores')
    last = tonumber(h[2])
  end
  -- Queue places end within a lease: the hour covers them.
  last = math.max(now, upto, last or now)
  local ttl = fmt(last - now + 3600000)
  redis.call('hset', KEYS[1], 'until', fmt(last + 3600000))
  for i = 1, 5 do
    redis.call('pexpire', KEYS[i], ttl)
  end
end
