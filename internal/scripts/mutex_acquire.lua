-- uses: lib
-- Acquire or re-enter the reentrant mutex.
--
-- The lock is one string key "<owner> <token> <count>", with flags
-- appended: " b" when the holder's Client reserved a block of tokens (it
-- may then hand the lock to another owner of its own without telling
-- Redis, so the owner in the value may no longer hold it: no re-entry
-- through another Client then), " w" once a waiter (of another Client)
-- has found it held: the release then grants the lock to the
-- longest-waiting wait queued for a grant, or publishes the wakeup, and
-- only then; " g" (before " w") on a value a release granted (lib.lua's
-- lock_grant) until its wait claims it here. After a release the key is kept as
-- a free marker "- <token> 0" for a while, so the next token continues the
-- sequence even if the server clock steps back.
--
-- KEYS[1] lock key; KEYS[2], optional, an attempt marker: set to "1" (for
-- one lease) when this call acquires or re-enters, so that a caller whose
-- reply was lost can undo exactly this call (mutex_undo.lua), never another
-- Client's hold of the same owner. If the undo ran first (rueidis may send
-- it on another connection), it left the marker "x": then do nothing.
-- Without KEYS[2] the owner was made for this one call: its undo
-- (mutex_undo_fresh.lua) releases whatever the owner holds and needs no
-- record of the grant, so its mark "<lock key>:x:<owner>" (the lock's hash
-- tag: same slot) is only checked, never set, and needs no argument.
-- ARGV[1] owner, ARGV[2] lease in ms; ARGV[3..5] only for an attempt that
-- waits if the lock is held (absent or "": a try): it marks the value " w"
-- then. And the waiting count, so that Inspect sees a Mutex's waiters
-- (they queue inside their process, not in Redis): "<lock key>:waiting" is
-- a hash "<client> <wait>" -> "<waiters> <expiry ms>", one entry per wait,
-- ARGV[3] the waiting Client, ARGV[4] how many of its goroutines wait
-- (absent: 1; "" not to register this time), ARGV[5] "1" if an earlier
-- attempt of this wait registered it (absent or anything else: not).
-- ARGV[6] (absent: 1) the tokens to reserve: the value records the last of
-- them, so the acquiring Client can hand the lock on inside its process
-- with the others, without a round trip. <wait> is the last 8 characters of the
-- wait's attempt marker (KEYS[2], or the fresh owner's mark), which tell
-- the waits of one Client apart (a sequence number, or 32 random bits) at
-- little cost in memory. A failed attempt registers (until one lease from
-- now: a waiter tries again at least every lease/3); an acquisition that
-- registered before removes its entry. An entry per wait, not per Client:
-- the end of a wait that gave up, sent in the background
-- (mutex_unwait.lua), removes its own entry only, never the one a newer
-- wait of the same Client has just made, nor, while that one is there,
-- the " w" mark. A wait by an owner made for it (no KEYS[2]) also queues
-- for a grant at its first registration, "<lease> <owner> <entry>" in
-- "<lock key>:gq" (lib.lua's lock_grant). The first attempt of an uncontended acquisition touches
-- nothing but the lock: one key and three arguments (two for a try).
-- ARGV[1] alone is the most common attempt in one argument (each costs
-- the server about 1.7k instructions): the first attempt of a wait by an
-- owner its Client made for the call, at the default lease, counted 1,
-- nothing reserved: ARGV[2] is then 30000 (dsync.DefaultLease, which a
-- test checks) and ARGV[3] the owner less its last 16 characters (made
-- only when the lock is held). Such an owner is "<client><deadline><n>":
-- the deadline, 10 decimal digits, is in server seconds, and n 6 hex
-- digits (appendDeadlineOwner). The call checks no attempt mark: when the
-- server clock has reached the deadline it does nothing and replies
-- {-2, server µs}, so that after the deadline no copy of it can apply (its
-- Client undoes a lost reply again then: Mutex.lateUndo).
-- Its common case reads the lock with GET, not MGET, takes TIME and writes
-- with SET ... PX (PSETEX would cost a little less, but is a command
-- users' ACLs for dsync do not list), and replies "- <token>", a string:
-- the token's digits are TIME's two strings, never made a number (two
-- conversions cost the server about 1.7k instructions; the string costs
-- the Client an allocation, which it saves elsewhere: freshMutexOwner).
-- The one-argument form's common case is tested before anything else;
-- the rest of the script is one function, made only when a call gets past
-- it.
-- Reply: token, an integer, acquired (token is the first reserved; a bare
-- integer, not {1, token}: the common reply is the cheapest to build and
-- to read; "- <token>" in the one-argument form's common case, whose
-- token is the server clock); {2, token} re-entered (the owner already held it
-- through another Client that reserved no block; the recorded token);
-- {0, pttl} held by another owner ({0, pttl, server µs} for a wait that
-- queued for a grant: the time dates a grant after it, grantStart in
-- dsync); {-2, server µs} the one-argument form
-- after its deadline: nothing done.
local key, owner, marker = KEYS[1], ARGV[1], KEYS[2]
local tm = nil
if not ARGV[2] then
  -- The deadline not reached (both 10 digits: a string comparison), the
  -- lock free (no key, or a free marker "- <token> 0" whose token has as
  -- many digits as the clock's and is below it: told by the length and
  -- two string comparisons; v > '- ' leaves out any value that does not
  -- begin with "- ").
  local v = redis.call('get', key)
  tm = redis.call('time')
  local sec, u = tm[1], tm[2]
  if not (sec < string.sub(owner, -16, -7)) then
    return {-2, sec * 1000000 + u}
  end
  if #u < 6 then
    u = string.sub('00000' .. u, -6)
  end
  local mk = '- ' .. sec .. u
  if not v or #v == #mk + 2 and v < mk and v > '- ' then
    redis.call('set', key, owner .. ' ' .. sec .. u .. ' 1', 'px', '30000')
    return mk
  end
end
return (function()
local lease = ARGV[2] or '30000'
if not marker then
  marker = key .. ':x:' .. owner
end
local r = redis.call('mget', key, marker)
local v = r[1]
if r[2] then
  return {0, 0}
end
-- The common case first, before the library (its functions are made only
-- when the script gets past it): the lock free (no key, or a free marker
-- "- <token> 0", parsed without a pattern's captures), no block to
-- reserve, and the server clock past the last token, which is then the
-- token (next_token). Its digits are TIME's two strings, the µs padded to
-- 6 (us_digits), and the value is made in one concatenation. Strings are
-- made numbers by arithmetic (one conversion each; tonumber converts
-- twice).
local free = not v or string.sub(v, 1, 2) == '- ' and owner ~= '-'
local prev = 0
if free then
  if v then
    prev = string.sub(v, 3, string.find(v, ' ', 3, true) - 1) + 0
  end
  tm = tm or redis.call('time')
  local us = tm[1] * 1000000 + tm[2]
  if prev < us and not ARGV[6] then
    local u = tm[2]
    if #u < 6 then
      u = string.sub('00000' .. u, -6)
    end
    redis.call('set', key, owner .. ' ' .. tm[1] .. u .. ' 1', 'px', lease)
    if KEYS[2] then
      redis.call('set', marker, '1', 'px', lease)
    end
    if ARGV[5] == '1' then
      local f = ARGV[3] .. ' ' .. string.sub(marker, -8)
      redis.call('hdel', key .. ':waiting', f)
      if not KEYS[2] then
        redis.call('lrem', key .. ':gq', 1, lease .. ' ' .. owner .. ' ' .. f)
      end
    end
    return us
  end
end
-- (lib.lua here)
local reply = nil
if not free then
  local o, t, c, w = lock_parse(v)
  if lock_orphaned(key, c, w) then
    -- Bound to a session that is gone (lib.lua): free, and its token
    -- continues the sequence.
    o = '-'
  end
  -- Granted to this wait (lib.lua's lock_grant), whose message was lost
  -- or came too late: an owner made for this one call (no KEYS[2]), so no
  -- other Client can hold through it yet.
  local grant = o == owner and not KEYS[2] and string.find(w, ' g', 1, true)
  if grant then
    -- Claimed: the lease starts again now, and the block asked for is
    -- reserved after the granted token.
    local last = tonumber(t)
    w = string.gsub(w, ' g', '')
    if ARGV[6] then
      last = last + tonumber(ARGV[6]) - 1
    end
    if last > tonumber(t) then
      w = ' b' .. w
    end
    redis.call('set', key, o .. ' ' .. fmt(last) .. ' ' .. c .. w, 'px', lease)
    return tonumber(t)
  elseif o == owner and not string.find(w, 'b', 1, true) then
    if string.find(w, ' s', 1, true) then
      -- Re-entered through another Client: a count above 1 is never bound
      -- (mutex_renew_session.lua), and its TTL, the session's backstop,
      -- is kept if longer than a lease (the binding Client writes it
      -- only every few rounds, and renews it every round once it finds
      -- it unbound).
      w = string.gsub(w, ' s%d+', '')
      redis.call('set', key, o .. ' ' .. t .. ' ' .. (c + 1) .. w, 'keepttl')
      if redis.call('pttl', key) < tonumber(lease) then
        redis.call('pexpire', key, lease)
      end
    else
      redis.call('set', key, o .. ' ' .. t .. ' ' .. (c + 1) .. w, 'px', lease)
    end
    reply = {2, tonumber(t)}
  elseif o ~= '-' then
    local client = ARGV[3]
    if not ARGV[2] then
      client = string.sub(owner, 1, -17)
    elseif client == '' then
      client = nil
    end
    if client and not string.find(w, 'w', 1, true) then
      redis.call('set', key, v .. ' w', 'keepttl')
    end
    local n = ARGV[4] or '1'
    local us = nil
    if client and n ~= '' then
      local wkey = key .. ':waiting'
      local now
      now, us = server_now()
      local all = redis.call('hgetall', wkey)
      for i = 1, #all, 2 do
        local e = tonumber(string.match(all[i + 1], ' (%d+)$'))
        if not e or e <= now then
          redis.call('hdel', wkey, all[i])
        end
      end
      local f = client .. ' ' .. string.sub(marker, -8)
      local new = redis.call('hset', wkey, f, n .. ' ' .. fmt(now + tonumber(lease))) == 1
      if redis.call('pttl', wkey) < tonumber(lease) then
        redis.call('pexpire', wkey, lease)
      end
      if new and not KEYS[2] then
        -- An owner made for this one wait queues for a grant (lib.lua's
        -- lock_grant) with its entry, again if the entry went (it lapsed,
        -- or a grant to it was released unclaimed: grantUnclaimed in
        -- dsync): a caller's owner may hold through other Clients, and is
        -- woken to look again instead.
        local q = key .. ':gq'
        redis.call('rpush', q, lease .. ' ' .. owner .. ' ' .. f)
        redis.call('pexpire', q, 2 * tonumber(lease))
      end
    end
    if client and not KEYS[2] then
      -- A wait that may be granted the lock: the server time dates a
      -- grant after this attempt (grantStart).
      if not us then
        local _
        _, us = server_now()
      end
      return {0, redis.call('pttl', key), us}
    end
    return {0, redis.call('pttl', key)}
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
  if not tm then
    tm = redis.call('time')
  end
  local us, digits = tonumber(tm[1]) * 1000000 + tonumber(tm[2]), us_digits(tm[1], tm[2])
  local tok = next_token(prev, us)
  local last, flags = tok, ''
  if ARGV[6] then
    last = tok + tonumber(ARGV[6]) - 1
  end
  if last > tok then
    flags = ' b'
  end
  if last ~= us then
    digits = fmt(last)
  end
  redis.call('set', key, owner .. ' ' .. digits .. ' 1' .. flags, 'px', lease)
  reply = tok
end
-- Acquired or re-entered: the attempt's marker records it, and a waiter
-- that registered leaves the waiting count.
if KEYS[2] then
  redis.call('set', marker, '1', 'px', lease)
end
if ARGV[5] == '1' then
  local f = ARGV[3] .. ' ' .. string.sub(marker, -8)
  redis.call('hdel', key .. ':waiting', f)
  if not KEYS[2] then
    -- Out of the queue for a grant too.
    redis.call('lrem', key .. ':gq', 1, lease .. ' ' .. owner .. ' ' .. f)
  end
end
return reply
end)()
