-- The library of every dsync script: scripts.go prepends it (and the
-- other preludes a script names on its first line, "-- uses: ...") before
-- the script's own body, so each script stays one atomic step.

-- server_now reads the server clock, once per script: in ms, and in µs.
local function server_now()
  local t = redis.call('time')
  local s, us = tonumber(t[1]), tonumber(t[2])
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
-- string.format('%.0f') does, at a fraction of its cost: integers below
-- 2e18 (tokens in µs, times in ms, counts) are printed as one or two
-- integers of at most 31 bits ('%.0f' runs the C library's multi-precision
-- float printing, several times a redis.call's price).
local function fmt(n)
  n = tonumber(n)
  if n >= 0 and n < 2e18 and n == math.floor(n) then
    if n < 1000000000 then
      return string.format('%d', n)
    end
    local hi = math.floor(n / 1000000000)
    local lo = n - hi * 1000000000
    if lo < 0 then
      hi, lo = hi - 1, lo + 1000000000
    elseif lo >= 1000000000 then
      hi, lo = hi + 1, lo - 1000000000
    end
    return string.format('%d%09d', hi, lo)
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
