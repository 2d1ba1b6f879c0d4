-- uses: lib group_lib
-- Take a call of a Group's key out of the record: its place among the
-- waiters goes, and a finished record nobody else waits for goes with it.
-- GroupLeave: ARGV[1] call id, ARGV[2] the key. GroupUndo: prepended to
-- once_undo.lua, ARGV[1] call id, ARGV[2] ms, ARGV[3] the key.
redis.call('zrem', KEYS[5], ARGV[1])
if redis.call('hget', KEYS[1], 'done') then
  settle(ARGV[#ARGV])
end
