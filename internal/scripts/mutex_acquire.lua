-- uses: lib
-- Acquire or re-enter the reentrant mutex.
--
-- The lock is one string key "<owner> <token> <count>", with flags
-- appended: " b" when the holder's Client reserved a block of tokens (it
-- may then hand the lock to another owner of its own without telling
-- Redis, so the owner in the value may no longer hold it: no re-entry
-- through another Client then), " w" once a waiter (of another Client)
-- has found it held: the release then publishes the wakeup, and only
-- then. After a release the key is kept as
-- a free marker "- <token> 0" for a while, so the next token continues the
-- sequence even if the server clock steps back.
--
-- KEYS[1] lock key; KEYS[2], optional, an attempt marker: set to "1" (for
-- one lease) when this call acquires or re-enters, so that a caller whose
-- reply was lost can undo exactly this call (mutex_undo.lua), never another
-- Client's hold of the same owner. If the undo ran first (rueidis may send
-- it on another connection), it left the marker "x": then do nothing.
-- ARGV[1] owner, ARGV[2] lease in ms, ARGV[3] tokens to reserve (>= 1): the
-- value records the last of them, so the acquiring Client can hand the lock
-- on inside its process with the others, without a round trip;
-- ARGV[4] "check" when KEYS[2] is only checked, never set: for an owner
-- made for this one call, whose undo (mutex_undo_fresh.lua) releases
-- whatever the owner holds and needs no record of the grant; "set" otherwise.
-- KEYS[3], ARGV[5..7], only for an attempt that waits if the lock is held
-- (not a try): it marks the value " w" then. And the waiting count, so that
-- Inspect sees a Mutex's waiters (they queue inside their process, not in
-- Redis): KEYS[3] is a hash "<client> <wait>" -> "<waiters> <expiry ms>",
-- one entry per wait, ARGV[5] the waiting Client, ARGV[6] how many of its
-- goroutines wait ("" not to register this time), ARGV[7] "1" if an
-- earlier attempt of this wait registered it (absent or anything else:
-- not). <wait> is the last 8 characters of the wait's attempt marker
-- (KEYS[2]), which tell the waits of one Client apart (a sequence number,
-- or 32 random bits) at little cost in memory. A failed attempt registers
-- (until one lease from now: a waiter tries again at least every
-- lease/3); an acquisition that registered before removes its entry. An
-- entry per wait, not per Client: the end of a wait that gave up, sent in
-- the background (mutex_unwait.lua), removes its own entry only, never
-- the one a newer wait of the same Client has just made, nor, while that
-- one is there, the " w" mark. The first attempt of an uncontended
-- acquisition touches nothing but the lock.
-- Reply: token, an integer, acquired (token is the first reserved; a bare
-- integer, not {1, token}: the common reply is the cheapest to build and
-- to read); {2, token} re-entered (the owner already held it through
-- another Client that reserved no block; the recorded token); {0, pttl}
-- held by another owner.
local v, undone
if KEYS[2] then
  local r = redis.call('mget', KEYS[1], KEYS[2])
  v, undone = r[1], r[2]
  if undone then
    return {0, 0}
  end
else
  v = redis.call('get', KEYS[1])
end
local prev, reply = 0, nil
if v and string.sub(v, 1, 2) == '- ' and ARGV[1] ~= '-' then
  -- A free marker "- <token> 0" (the common case: parsed without a
  -- pattern's captures): continue from its token.
  prev = tonumber(string.sub(v, 3, string.find(v, ' ', 3, true) - 1))
elseif v then
  local o, t, c, w = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
  if o == ARGV[1] and not string.find(w, 'b', 1, true) then
    redis.call('set', KEYS[1], o .. ' ' .. t .. ' ' .. (tonumber(c) + 1) .. w, 'px', ARGV[2])
    reply = {2, tonumber(t)}
  elseif o ~= '-' then
    if ARGV[5] and not string.find(w, 'w', 1, true) then
      redis.call('set', KEYS[1], v .. ' w', 'keepttl')
    end
    if ARGV[6] and ARGV[6] ~= '' then
      local now = server_now()
      local all = redis.call('hgetall', KEYS[3])
      for i = 1, #all, 2 do
        local e = tonumber(string.match(all[i + 1], ' (%d+)$'))
        if not e or e <= now then
          redis.call('hdel', KEYS[3], all[i])
        end
      end
      redis.call('hset', KEYS[3], ARGV[5] .. ' ' .. string.sub(KEYS[2], -8), ARGV[6] .. ' ' .. fmt(now + tonumber(ARGV[2])))
      if redis.call('pttl', KEYS[3]) < tonumber(ARGV[2]) then
        redis.call('pexpire', KEYS[3], ARGV[2])
      end
    end
    return {0, redis.call('pttl', KEYS[1])}
  else
    prev = tonumber(t)
  end
end
-- Fencing token: one more than the last, and never below the server clock in
-- microseconds, so a FLUSHALL, a restart or a failover to a lagging replica
-- cannot make a token repeat. The Client issues the reserved block's tokens
-- only while they are not ahead of the server clock (Mutex.passOn), and the
-- free marker records the last token issued, not the block's end; so every
-- token issued is at most the server clock when issued, and one minted from
-- the clock after the state is lost is above all of them.
if not reply then
  local us, digits = server_us()
  local tok = next_token(prev, us)
  local last = tok + tonumber(ARGV[3]) - 1
  local flags = ''
  if last > tok then
    flags = ' b'
  end
  if last ~= us then
    digits = fmt(last)
  end
  redis.call('set', KEYS[1], ARGV[1] .. ' ' .. digits .. ' 1' .. flags, 'px', ARGV[2])
  reply = tok
end
-- Acquired or re-entered: the attempt's marker records it, and a waiter
-- that registered leaves the waiting count.
if KEYS[2] and ARGV[4] ~= 'check' then
  redis.call('set', KEYS[2], '1', 'px', ARGV[2])
end
if ARGV[7] == '1' then
  redis.call('hdel', KEYS[3], ARGV[5] .. ' ' .. string.sub(KEYS[2], -8))
end
return reply
