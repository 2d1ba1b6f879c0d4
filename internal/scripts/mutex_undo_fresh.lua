-- Undo an acquisition by an owner made for this one call, which holds
-- nothing else: mark the attempt undone first, so that an acquire still on
-- its way (rueidis may send it on another connection) does nothing when it
-- arrives (mutex_acquire.lua checks "<lock key>:x:<owner>"), then
-- release what the owner holds, if the acquire ran first. The rest is the
-- release script (appended), called with the owner alone (any of its
-- holds). Repeating it is harmless.
--
-- KEYS[#KEYS] the attempt's mark (the other KEYS and ARGV as the release's)
redis.call('set', KEYS[#KEYS], 'x', 'px', 60000)
