-- uses: lib cond_lib
-- Signal (ARGV[1] "one") the longest-waiting live waiter of a Cond, or
-- Broadcast ("all") to every waiter waiting now. Reply: waiters woken.
prune()
if ARGV[1] == 'one' then
  return wake_one()
end
local n = 0
while wake_one() == 1 do
  n = n + 1
end
return n
