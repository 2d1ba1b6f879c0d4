-- uses: lib
-- Apply a Client's queued hold-tag changes for one lock (see dsync's
-- Observer.HoldTag), in the order they happened: holds that began (their
-- tag kept while they last) and holds that ended (their tag removed, and
-- the hold recorded in the lock's history, where a waiter of any Client
-- finds, when its wait ends, every hold that held the lock during it).
--
-- KEYS[1] the lock's tag hash (owner in Redis -> "<expiry ms> <start µs>
-- <tag>", see tag_set.lua), KEYS[2] the lock's history, a list of ended
-- holds "<end µs> <start µs> <tag>", newest first
-- ARGV[1] unused, ARGV[2] the history's lifetime in ms, ARGV[3] the most
-- entries it keeps, ARGV[4] the Client's clock in µs (the entries' times
-- are the Clients' clocks), then one change per four arguments: "s",
-- owner, the tag's lifetime in ms, "<start µs> <tag>" (a hold began), or
-- "e", owner, "", "<end µs> <start µs> <tag>" (a hold ended: its field is
-- removed if it is still this hold's, and the entry pushed), or "E", as
-- "e" for a hold whose tag was never sent (the entry alone). An end of 0
-- ("0 <start µs> <tag>") is the server's clock as the script runs: the
-- end of a hold whose release comes right after, in the same pipeline.
-- The history keeps at most ARGV[3] entries, none that ended more than its
-- lifetime before the newest push (by the pushing Client's clock), and
-- expires its lifetime after the last push; the hash, when a change
-- touched it, drops expired fields and lives as long as its latest field.
-- The entries are pushed in one LPUSH (the newest ARGV[3] of them: the
-- others would be trimmed at once), and the server's clock is read only
-- for the hash and for an end of 0.
local now, now_us
local function clock()
  if not now then
    now, now_us = server_now()
  end
end
local touched = false
local ends = {}
for i = 5, #ARGV, 4 do
  local op, owner, v = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  if op == 's' then
    clock()
    redis.call('hset', KEYS[1], owner, fmt(now + tonumber(ARGV[i + 2])) .. ' ' .. v)
    touched = true
  else
    if string.sub(v, 1, 2) == '0 ' then
      clock()
      v = fmt(now_us) .. string.sub(v, 2)
    end
    if op == 'e' then
      local cur = redis.call('hget', KEYS[1], owner)
      local held = string.match(v, '^%d+ (.*)$')
      if cur and string.match(cur, '^%d+ (.*)$') == held then
        redis.call('hdel', KEYS[1], owner)
        touched = true
      end
    end
    ends[#ends + 1] = v
  end
end
if #ends > 0 then
  local hlife, most = tonumber(ARGV[2]), tonumber(ARGV[3])
  redis.call('lpush', KEYS[2], unpack(ends, math.max(1, #ends - most + 1)))
  redis.call('ltrim', KEYS[2], 0, most - 1)
  local oldest = tonumber(ARGV[4]) - hlife * 1000
  for _ = 1, most do
    local last = redis.call('lindex', KEYS[2], -1)
    local e = last and tonumber(string.match(last, '^(%d+) '))
    if not e or e >= oldest then
      break
    end
    redis.call('rpop', KEYS[2])
  end
  redis.call('pexpire', KEYS[2], hlife)
end
if touched then
  clock()
  local keep = 0
  local all = redis.call('hgetall', KEYS[1])
  for i = 1, #all, 2 do
    local e = tonumber(string.match(all[i + 1], '^(%d+) ') or '0')
    if e <= now then
      redis.call('hdel', KEYS[1], all[i])
    elseif e > keep then
      keep = e
    end
  end
  if keep > now then
    redis.call('pexpire', KEYS[1], keep - now)
  end
end
return 0
