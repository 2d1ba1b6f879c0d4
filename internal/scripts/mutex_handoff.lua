-- uses: lib
-- Hand the mutex from one owner to another of the same Client in one step,
-- with a fresh fencing token, instead of a release and an acquire; or, when
-- asked to check and other processes wait, release it to them instead.
-- Another Client waits when its attempt found the lock held: it marked the
-- value " w" (mutex_acquire.lua; the mark stays through handoffs, and goes
-- with the release, or with the last waiter's unwait). A subscription alone
-- is no wait: a Client stays subscribed a while after its waits ended.
--
-- KEYS[1] lock key, KEYS[2] wakeup channel
-- ARGV[1] from owner, ARGV[2] from token, ARGV[3] to owner,
-- ARGV[4] lease in ms for the new holder,
-- ARGV[5] "-1": hand over; n >= 0: yield instead if another Client marked
-- the value and the channel has more than n subscribers (n being the
-- caller's own subscription, 0 or 1); "w": yield if another Client marked
-- the value, subscribed or not (the Client's hard cap, and a cluster whose
-- PUBSUB NUMSUB sees one node only),
-- ARGV[6] free-marker lifetime in ms (for a yield),
-- ARGV[7] tokens to reserve for the new holder's Client (>= 1),
-- ARGV[8] (optional) the last token issued under the from hold (see
-- mutex_release.lua): the new token continues from it, not from the
-- reserved block's end, which may be ahead of the clock
-- Reply: {1, token} handed over; {2} released to other processes (yield);
-- {0} the from owner no longer holds it alone.
local v = redis.call('get', KEYS[1])
if not v then
  return {0}
end
local o, t, c, w = lock_parse(v)
local used = ARGV[8]
if not used or used == '0' then
  used = ARGV[2]
end
if o == ARGV[3] and c == 1 and t ~= ARGV[2] then
  -- A retry of a handoff that was applied.
  return {1, tonumber(t) - tonumber(ARGV[7]) + 1}
end
if o == '-' and (t == ARGV[2] or t == used) then
  -- A retry of a yield that was applied.
  return {2}
end
if o ~= ARGV[1] or t ~= ARGV[2] or c ~= 1 then
  return {0}
end
local own = ARGV[5]
if own ~= '-1' and string.find(w, 'w', 1, true) then
  -- Waiters of other processes are subscribed to the channel while they
  -- wait; the handing Client's own waiters are not (they wait locally).
  if own == 'w' or redis.call('pubsub', 'numsub', KEYS[2])[2] > tonumber(own) then
    if not lock_grant(KEYS[1], used) then
      redis.call('set', KEYS[1], '- ' .. used .. ' 0', 'px', ARGV[6])
      redis.call('publish', KEYS[2], used)
    end
    return {2}
  end
end
local _, us = server_now()
local tok = next_token(tonumber(used), us)
local last = tok + tonumber(ARGV[7]) - 1
-- Flags (mutex_acquire.lua): a waiter's mark stays; " b" with a block;
-- a binding to the Client's session goes (the new hold binds at its own
-- first renewal: mutex_renew_session.lua).
w = string.gsub(string.gsub(string.gsub(w, ' b', ''), ' s%d+', ''), ' g', '')
if last > tok then
  w = ' b' .. w
end
redis.call('set', KEYS[1], ARGV[3] .. ' ' .. fmt(last) .. ' 1' .. w, 'px', ARGV[4])
return {1, tok}
