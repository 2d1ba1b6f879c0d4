-- The library of every dsync script: scripts.go prepends it (and the
-- other preludes a script names on its first line, "-- uses: ...") before
-- the script's own body, so each script stays one atomic step.

-- server_now reads the server clock, once per script: in ms, and in µs.
local function server_now()
  local t = redis.call('time')
  local s, us = t[1] + 0, t[2] + 0 -- (strings made numbers)
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- us_digits spells the time s seconds and us µs (TIME's two strings) in
-- µs: the seconds, then the µs padded to 6 digits. It is fmt of the same
-- number without formatting one.
local function us_digits(s, us)
  return s .. string.sub('00000' .. us, -6)
end

-- server_us reads the server clock, once per script, in µs: as a number,
-- and as its decimal digits (us_digits).
local function server_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), us_digits(t[1], t[2])
end

-- fmt formats a number as an integer (Lua would print 1e+15), as
-- string.format('%.0f') does, at a fraction of its cost: Redis's Lua
-- formats '%d' as a C long (64 bits), so every integer a script handles
-- (tokens in µs, times in ms, counts) is one integer conversion ('%.0f'
-- runs the C library's float printing).
local function fmt(n)
  n = n + 0 -- (a number, or a string made one)
  if n > -9e18 and n < 9e18 and n == math.floor(n) then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- next_token is the fencing token after last: one more, and never below
-- the server clock in µs (us), so that no loss of Redis state (FLUSHALL, a
-- restart, a failover to a lagging replica, a key expired after a crash)
-- can make a later token smaller than one issued before.
local function next_token(last, us)
  return math.max(last + 1, us)
end

-- lock_parse splits the value of a Mutex or FairMutex lock, "<owner>
-- <token> <count><rest>" (rest: a Mutex's flags " b" and " w", or a
-- FairMutex grant's " <wid> <last>"): the owner, the token (its digits),
-- the count (a number) and the rest; nils for a value of another layout.
local function lock_parse(v)
  local o, t, c, rest = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
  return o, t, tonumber(c), rest
end

-- lock_release_one takes one count off the hold (o, t, c, rest: lock_parse)
-- of lock k, keeping its TTL, and returns 2 (still held) if it has more
-- than one; with one count it does nothing and returns nil: the caller
-- frees the lock its own way.
local function lock_release_one(k, o, t, c, rest)
  if c > 1 then
    redis.call('set', k, o .. ' ' .. t .. ' ' .. (c - 1) .. rest, 'keepttl')
    return 2
  end
  return nil
end

-- lock_session returns the session key a Mutex hold's value is bound to,
-- or nil when it is not bound (rest: lock_parse's, whose flags then carry
-- " s<sid>", before a trailing " w"): the session key of the holder's
-- Client is "<prefix>:s:<sid>", the prefix being the lock key's up to its
-- first ":{" (Clients bind holds only under a prefix without braces).
local function lock_session(k, rest)
  local sid = string.match(rest, ' s(%d+)')
  if sid then
    return string.sub(k, 1, string.find(k, ':{', 1, true) - 1) .. ':s:' .. sid
  end
  return nil
end

-- lock_orphaned reports whether the hold (c, rest: lock_parse's) of the
-- Mutex lock k is free because it is bound to a session that is gone: its
-- Client stopped renewing the session a whole lease ago, or lost it. A
-- hold with a count above 1 is never bound (a re-entry through another
-- Client unbinds it: mutex_acquire.lua).
local function lock_orphaned(k, c, rest)
  if c ~= 1 then
    return false
  end
  local s = lock_session(k, rest)
  return s ~= nil and redis.call('exists', s) == 0
end

-- lock_grant hands the Mutex lock k, being released with used the last
-- token issued under it, to the longest-waiting wait that can take a
-- grant, in one step: the one-hop grant. Waits queue for grants in
-- "<k>:gq", "<lease ms> <owner> <field>" in arrival order, each with an
-- owner made for it alone (mutex_acquire.lua); a wait is live while its
-- entry <field> in the waiting hash "<k>:waiting" ("<n> <expiry ms>") has
-- not lapsed. The grant makes the wait's owner the holder, "<owner>
-- <token> 1 g" (" w" after it while a wait of another Client is counted), for the wait's
-- lease, removes its entry, and publishes "<owner> <token> <µs>" on the
-- lock's channel, µs the grant's server time. The wait's next attempt
-- claims the grant if the message is lost (the owner and " g": nobody
-- else has that owner before the wait returns), and its end releases it
-- if it gave up (mutex_unwait.lua). It returns the token (its digits), or nil when no
-- live wait queues (dead ones are dropped on the way).
local function lock_grant(k, used)
  local q, wk = k .. ':gq', k .. ':waiting'
  local e = redis.call('lpop', q)
  if not e then
    return nil
  end
  local t = redis.call('time')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  while e do
    -- The entry's three fields told by its first two spaces (owners have
    -- none), without a pattern's captures; the waiting count's expiry
    -- after the count's space.
    local i = string.find(e, ' ', 1, true)
    local j = i and string.find(e, ' ', i + 1, true)
    local f = j and string.sub(e, j + 1)
    local val = f and f ~= '' and redis.call('hget', wk, f)
    local s = val and string.find(val, ' ', 1, true)
    local ex = s and tonumber(string.sub(val, s + 1))
    local ls = ex and ex > now and tonumber(string.sub(e, 1, i - 1))
    if ls then
      -- The token: the server clock in µs, its digits TIME's (us_digits),
      -- unless used is not below it (tokens of as many digits compare as
      -- strings).
      local d = us_digits(t[1], t[2])
      local us = d
      if not (#used == #d and used < d) then
        d = fmt(next_token(tonumber(used), t[1] * 1000000 + t[2]))
      end
      redis.call('hdel', wk, f)
      -- Marked while a wait of another Client than the grantee's is
      -- counted (an entry "<client> <wait>", or "<client> local").
      local flags = ' g'
      local others = redis.call('hkeys', wk)
      if #others > 0 then
        local cl = string.match(f, '^(.*) ')
        for _, o in ipairs(others) do
          if string.match(o, '^(.*) ') ~= cl then
            flags = ' g w'
            break
          end
        end
      end
      redis.call('set', k, string.sub(e, i + 1, j - 1) .. ' ' .. d .. ' 1' .. flags, 'px', ls)
      redis.call('publish', k .. ':ch', string.sub(e, i + 1, j - 1) .. ' ' .. d .. ' ' .. us)
      return d
    end
    e = redis.call('lpop', q)
  end
  return nil
end
