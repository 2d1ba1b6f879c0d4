-- uses: lib fair_lib rw_lib
-- Acquire or re-enter the read or the write lock of an rw mutex, or wait
-- for a grant, under the rules written at the top of rw_lib.lua.
--
-- KEYS[1..6] as in rw_lib.lua, KEYS[7] optional attempt marker (as in
-- mutex_acquire.lua)
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] lease in ms,
-- ARGV[4] queue-place lease in ms, ARGV[5] "1" for a try, ARGV[6] waiter
-- channel prefix, ARGV[7] the wait's wid
-- Reply: {1, token} acquired; {2, token} re-entered; {3, token} granted to
-- this wait by a release whose message it has not seen; {0, ms, µs} not
-- granted: call again within ms (µs: the server time now, as for the fair
-- mutex).
if undone(KEYS[7]) then
  return {0, 0} -- the undo of this attempt ran first: do nothing
end
local now, us = server_now()
local owner, lease, place, wid = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[7]
local m = owner .. ' ' .. wid .. ' ' .. ARGV[3]
rw_load(owner)
local w, wt, wc, wexp, wg = rw_writer(now)
if ARGV[1] == 'read' then
  local r = rw_r
  if r then
    local c, t, g = string.match(r, '^(%d+) (%d+) ?(%S*)$')
    local s = tonumber(redis.call('zscore', KEYS[2], owner) or '0')
    if s > now then
      if g == wid then
        -- The claim's lease starts now: the caller counts it from this
        -- attempt's send time, which may be long after the grant.
        local x = math.max(s, now + lease)
        redis.call('zadd', KEYS[2], x, owner)
        rw_keep(x)
        return granted(KEYS[7], ARGV[3], {3, tonumber(t)})
      end
      local x = math.max(s, now + lease)
      redis.call('hset', KEYS[1], 'r:' .. owner, (tonumber(c) + 1) .. ' ' .. t .. (g ~= '' and (' ' .. g) or ''))
      redis.call('zadd', KEYS[2], x, owner)
      rw_unwait_reader(m)
      rw_keep(x)
      return granted(KEYS[7], ARGV[3], {2, tonumber(t)})
    end
  end
  -- A writer blocks new readers (but not its own read: a downgrade), and
  -- so does a queued one, unless nothing is held: then it is granted now.
  local blocked = w and w ~= owner
  if not w and live_head(KEYS[3], KEYS[4], now) then
    if rw_readers(now) == 0 then
      rw_grant_writer(now, us, ARGV[6])
    end
    blocked = true
  end
  if blocked then
    if ARGV[5] ~= '1' then
      rw_wait_reader(m, now + place)
    end
    local wait = place
    if w then
      wait = tonumber(wexp) - now
    end
    return {0, math.max(math.min(wait, place), 1), us}
  end
  rw_prune_readers(now)
  local tok = rw_token(us)
  local mode = w and 'write' or 'read'
  if rw_mode == mode then
    rw_add_reader(owner, '1 ' .. tok, now + lease, 'tok', tok)
  else
    rw_mode = mode
    rw_add_reader(owner, '1 ' .. tok, now + lease, 'tok', tok, 'mode', mode)
  end
  rw_unwait_reader(m)
  return granted(KEYS[7], ARGV[3], {1, tonumber(tok)})
end
if w == owner then
  if wg == wid then
    -- The claim's lease starts now (see the read claim above).
    local x = math.max(tonumber(wexp), now + lease)
    redis.call('hset', KEYS[1], 'wexp', fmt(x))
    rw_keep(x)
    return granted(KEYS[7], ARGV[3], {3, tonumber(wt)})
  end
  local x = math.max(tonumber(wexp), now + lease)
  redis.call('hset', KEYS[1], 'wc', tonumber(wc) + 1, 'wexp', fmt(x))
  if redis.call('zrem', KEYS[4], m) == 1 then
    redis.call('lrem', KEYS[3], 0, m)
  end
  rw_keep(x)
  return granted(KEYS[7], ARGV[3], {2, tonumber(wt)})
end
local wait
if w then
  wait = tonumber(wexp) - now
else
  local readers = rw_readers(now)
  local reading = readers > 0 and redis.call('zscore', KEYS[2], owner)
  if reading then
    readers = readers - 1
  end
  if readers == 0 then
    local head = live_head(KEYS[3], KEYS[4], now)
    -- The only reader upgrades ahead of the queue: the queued writers
    -- cannot get in before it leaves, so making it wait for them would
    -- deadlock.
    if not head or head == m or reading then
      if redis.call('zrem', KEYS[4], m) == 1 then
        redis.call('lrem', KEYS[3], 0, m)
      end
      local tok = rw_take_write(owner, lease, now, us, nil, ARGV[6])
      return granted(KEYS[7], ARGV[3], {1, tonumber(tok)})
    end
    -- Free, but another writer is first (the last holder's lease ran out,
    -- so no release granted it): grant it now.
    rw_grant_writer(now, us, ARGV[6])
    wait = lease
  else
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    wait = tonumber(first[2] or now + place) - now
  end
end
if ARGV[5] ~= '1' then
  rw_queue(m, now + place)
end
return {0, math.max(math.min(wait, place), 1), us}
