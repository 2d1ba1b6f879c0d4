-- uses: lib
-- The renewal round's batch for the Mutex holds of a Client that keeps a
-- session (dsync/session.go): mutex_renew_many.lua's check of each hold,
-- and the hold bound to the session when it can be.
--
-- A hold is bound when its value is the hold's with a count of 1 and the
-- session key exists: " s<sid>" is added to its flags (before a trailing
-- " w", which mutex_unwait.lua strips from the end) and its TTL set to the
-- backstop, 7/3 of the lease in whole ms (dsync/session.go's
-- sessionBackstop: the hold is written every fifth round of lease/3,
-- with a third of a lease spare). A bound hold lives as long as its session
-- key (renewed by one PEXPIRE per Client per round): once that is gone the
-- hold is free (lib.lua's lock_orphaned), and the Client renews the hold
-- itself only every few rounds, with this script, which moves the
-- backstop on. A hold with a count above 1 (re-entered through another
-- Client) is unbound here, as the re-entry unbinds it, and renewed for a
-- lease unless its TTL is longer.
--
-- A batch is of holds the Client believes bound (ARGV[3] "b") or not
-- ("u"), each sent as "<owner> <token> 1". Most holds have the value they
-- most often have then, which the script checks without making a string:
-- bound, that argument followed by " s<sid>" (its length and two plain
-- finds); not bound, the argument itself (two interned strings compared,
-- see mutex_renew_many.lua). Any other value is checked by its prefix.
--
-- KEYS[1] the session key, KEYS[i+1] lock key of hold i
-- ARGV[1] lease in ms, ARGV[2] the session's sid, ARGV[3] "b" or "u",
-- ARGV[i+3] hold i's "<owner> <token> 1"
-- Reply: {gone, flipped}: the numbers (from 1) of the holds gone, and of
-- those whose binding is not the batch's after this call (bound in a "u"
-- batch, not bound in a "b" one); every other hold was renewed.
local now = server_now()
local lease = tonumber(ARGV[1])
local long = fmt(now + math.floor(7 * lease / 3))
local short = nil
local keys, argv, call, find, sub, match = KEYS, ARGV, redis.call, string.find, string.sub, string.match
local sid, batch = ARGV[2], ARGV[3]
local tail = ' s' .. sid
local live = nil -- the session key exists (read once, when needed)
local vs, gone, flipped = call('mget', unpack(keys, 2)), {}, {}
for i = 1, #keys - 1 do
  local k, v, a = keys[i + 1], vs[i], argv[i + 3]
  if batch == 'b' and v and #v == #a + #tail and find(v, a, 1, true) == 1 and find(v, tail, #a + 1, true) then
    -- The common case of a bound hold.
    call('pexpireat', k, long)
  else
    -- The hold's value prefix "<owner> <token> ", its count and flags.
    local pre = sub(a, 1, -2)
    local c, rest = nil, nil
    if v and find(v, pre, 1, true) == 1 then
      c, rest = match(v, '^(%d+)(.*)$', #pre + 1)
    end
    local s = rest and match(rest, ' s(%d+)')
    local isBound = false
    if not c or s and s ~= sid and c == '1' then
      -- Gone; or bound to another session of this Client's, which it
      -- lost with every hold bound to it.
      gone[#gone + 1] = i
    elseif c ~= '1' then
      -- Shared by Clients (a re-entry through another one): unbound, and
      -- its TTL never lowered: a Client that bound the hold may not know
      -- yet that it is shared, and counts on its backstop until its next
      -- write finds out.
      if s then
        call('set', k, pre .. c .. string.gsub(rest, ' s%d+', ''), 'keepttl')
      end
      if call('pttl', k) < lease then
        short = short or fmt(now + lease)
        call('pexpireat', k, short)
      end
    elseif s then
      call('pexpireat', k, long)
      isBound = true
    else
      if live == nil then
        live = call('exists', keys[1]) == 1
      end
      if live then
        if sub(rest, -2) == ' w' then
          rest = sub(rest, 1, -3) .. tail .. ' w'
        else
          rest = rest .. tail
        end
        call('set', k, pre .. '1' .. rest, 'pxat', long)
        isBound = true
      else
        short = short or fmt(now + lease)
        call('pexpireat', k, short)
      end
    end
    if c and not (s and s ~= sid and c == '1') and isBound ~= (batch == 'b') then
      flipped[#flipped + 1] = i
    end
  end
end
return {gone, flipped}
