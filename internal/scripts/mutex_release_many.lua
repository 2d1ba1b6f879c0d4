-- uses: lib
-- Release many holds of the reentrant mutex in one call: Client.Close's
-- batch form of mutex_release.lua, hold by hold the same steps, checks and
-- replies, for known holds only (the value prefix with its token). In a
-- cluster the caller batches only keys of one slot.
--
-- One call instead of one per hold saves what every EVALSHA costs Redis
-- besides its script (the command, the script's lookup, the KEYS and ARGV
-- tables): at Close, 10,000 holds released while another Client's
-- goroutines wait for them, whose acquisitions share Redis's one thread
-- with the releases, so the last waiter is woken sooner. Each wakeup is
-- published as its hold is released; Redis sends them when the call ends.
--
-- KEYS[i] lock key of hold i; ARGV[2i-1] its value prefix "<owner> <token> "
-- (mutex_release.lua's ARGV[1] without its count), ARGV[2i] the last token
-- issued under it
-- (its ARGV[2]), or "" for the token itself.
-- Reply: one code per hold, in order, as mutex_release.lua's: 1 released
-- (the lock is free), 2 count decremented (the owner still holds it), 0 not
-- held by this owner.
local out, find, sub = {}, string.find, string.sub
for i = 1, #KEYS do
  local key, p, used = KEYS[i], ARGV[2 * i - 1], ARGV[2 * i]
  local sp = find(p, ' ', 1, true)
  local tok = sub(p, sp + 1, -2)
  if used == '' then
    used = tok
  end
  local v = redis.call('set', key, '- ' .. used .. ' 0', 'xx', 'keepttl', 'get')
  local r = 1
  if v == p .. '1' and used == tok then
    -- The common case: the owner's only hold, no block, no waiter's
    -- mark; the marker written above is the release.
    r = 1
  elseif not v then
    r = 0
  else
    local o, t, c, w = lock_parse(v)
    if o == '-' and (t == tok or t == used) then
      -- Our own earlier release: a no-op.
      if t ~= used then
        redis.call('set', key, v, 'keepttl')
      end
    elseif o == sub(p, 1, sp - 1) and t == tok then
      if lock_release_one(key, o, t, c, w) then
        r = 2
      elseif find(w, 'w', 1, true) and not lock_grant(key, used) then
        redis.call('publish', key .. ':ch', used)
      end
    else
      redis.call('set', key, v, 'keepttl')
      r = 0
    end
  end
  out[i] = r
end
return out
