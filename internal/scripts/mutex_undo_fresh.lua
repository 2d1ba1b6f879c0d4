-- Undo an acquisition by an owner made for this one call, which holds
-- nothing else: mark the attempt undone first, so that an acquire still on
-- its way (rueidis may send it on another connection) does nothing when it
-- arrives (it checks the mark: ARGV[4] "check" in mutex_acquire.lua), then
-- release what the owner holds, if the acquire ran first. The rest is the
-- release script (appended), called with token "0". Repeating it is
-- harmless.
--
-- KEYS[#KEYS] the attempt's mark (the other KEYS and ARGV as the release's)
redis.call('set', KEYS[#KEYS], 'x', 'px', 60000)
