-- Extend the runner's lease while f runs.
--
-- KEYS[1] run key; ARGV[1] "<owner> <token> <call>", ARGV[2] lease ms
-- Reply: 1 renewed, 0 the run is no longer ours.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
