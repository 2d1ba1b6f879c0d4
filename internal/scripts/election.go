package scripts

// The Election's scripts, on its lock (a fair mutex, whose own scripts
// queue, grant, renew and release it) and its leader record; each body
// names its preludes (election_lib.lua, lib.lua) on its first line.
var (
	ElectionBegin    = script("election_begin.lua")
	ElectionProclaim = script("election_proclaim.lua")
	ElectionResign   = script("election_resign.lua")
	ElectionTouch    = script("election_touch.lua")
	ElectionRead     = script("election_read.lua")
)
