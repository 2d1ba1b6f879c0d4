-- Undo one acquisition of the reentrant mutex whose reply was lost, if and
-- only if it was applied: the acquire script set its attempt marker to "1".
-- If the acquire has not run yet (it may still be on its way on another
-- connection), leave the marker "x" for a minute, which makes it a no-op.
-- The rest is mutex_release.lua (appended), releasing one count of the
-- owner. Repeating it is harmless: the marker is "x" after the first run.
--
-- KEYS[3] attempt marker (KEYS[1], KEYS[2], ARGV as mutex_release.lua)
-- Reply: 0 when the acquisition was not applied (or already undone),
-- otherwise mutex_release.lua's reply.
local applied = redis.call('get', KEYS[3]) == '1'
redis.call('set', KEYS[3], 'x', 'px', 60000)
if not applied then
  return 0
end
