-- Undo one acquisition of the reentrant mutex whose reply was lost, if and
-- only if it was applied: the acquire script set its attempt marker to "1".
-- If the acquire has not run yet (it may still be on its way on another
-- connection), leave the marker "x" for a minute, which makes it a no-op.
-- The rest is the kind's release script (appended: mutex_release.lua,
-- fair_release.lua, rw_release.lua), releasing one count of the owner.
-- Repeating it is harmless: the marker is "x" after the first run.
--
-- KEYS[#KEYS] attempt marker (the other KEYS and ARGV as the release's)
-- Reply: 0 when the acquisition was not applied (or already undone),
-- otherwise the release's reply.
local applied = redis.call('get', KEYS[#KEYS]) == '1'
redis.call('set', KEYS[#KEYS], 'x', 'px', 60000)
if not applied then
  return 0
end
