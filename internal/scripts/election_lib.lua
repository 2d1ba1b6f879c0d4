-- uses: lib
-- The prelude of the election scripts (see lib.lua).
--
-- An election queues its candidates on a fair mutex (its lock value is
-- "<owner> <token> <count>", or the free marker "- <token> 0"); the leader
-- holds it, and its term is the lock's fencing token. The leader record is a
-- list of the election's last changes, oldest first, the last one current:
--   "<version> <term> <since ms> <#owner> <owner><value>"
-- with term "0" (and no owner, no value) for "no leader". Versions grow
-- strictly (the server clock in µs, or past the last one), also across the
-- list's expiry, so an observer can tell which changes it has seen. The
-- list is short (maxLog): enough for an observer to get every change in
-- order while it keeps up, and a slow one catches up on the current state.

local maxLog = 32

-- holder returns the owner and token (as text) of the lock, or nil when it
-- is free.
local function holder(k)
  local v = redis.call('get', k)
  if not v then
    return nil
  end
  local o, t = lock_parse(v)
  if o == '-' then
    return nil
  end
  return o, t
end

-- last_entry returns the version (a number), term, owner, start and value
-- of the current record, or nil when there is none.
local function last_entry(log)
  local e = redis.call('lindex', log, -1)
  if not e then
    return nil
  end
  local ver, term, since, n = string.match(e, '^(%d+) (%d+) (%d+) (%d+) ')
  local at = #ver + #term + #since + #n + 4
  n = tonumber(n)
  return tonumber(ver), term, string.sub(e, at + 1, at + n), since, string.sub(e, at + n + 1)
end

-- append records a change after version prev and returns its version.
local function append(log, prev, term, since, owner, value, us)
  local ver = next_token(prev, us) -- versions grow as tokens do
  redis.call('rpush', log, fmt(ver) .. ' ' .. term .. ' ' .. since .. ' ' .. #owner .. ' ' .. owner .. value)
  redis.call('ltrim', log, -maxLog, -1)
  return ver
end
