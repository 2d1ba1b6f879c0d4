-- uses: lib election_lib
-- Read an election: its lock and the changes after a version.
--
-- KEYS[1] lock, KEYS[2] record list
-- ARGV[1] the version the reader has seen, "0" for none
-- Reply (all strings): {lock value or "", lock pttl, seen, entries...}: seen
-- is 1 when the reader's version is in the list, and the entries are that
-- change and every later one, oldest first; otherwise (0) the only entry,
-- if any, is the current one. The last entry is always the current one.
local v = redis.call('get', KEYS[1]) or ''
local out = {v, tostring(redis.call('pttl', KEYS[1])), '0'}
local n = redis.call('llen', KEYS[2])
local from = n - 1 -- 0-based index of the first entry to send
if ARGV[1] ~= '0' then
  -- Newest first: a reader that keeps up has seen all but the last few.
  for i = n - 1, 0, -1 do
    local e = redis.call('lindex', KEYS[2], i)
    if string.match(e, '^(%d+) ') == ARGV[1] then
      from, out[3] = i, '1'
      break
    end
  end
end
for i = math.max(from, 0), n - 1 do
  out[#out + 1] = redis.call('lindex', KEYS[2], i)
end
return out
