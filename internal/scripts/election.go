package scripts

import _ "embed"

var (
	//go:embed election_lib.lua
	electionLibSrc string
	//go:embed election_begin.lua
	electionBeginSrc string
	//go:embed election_proclaim.lua
	electionProclaimSrc string
	//go:embed election_resign.lua
	electionResignSrc string
	//go:embed election_touch.lua
	electionTouchSrc string
	//go:embed election_read.lua
	electionReadSrc string
)

// The Election's scripts, on its lock (a fair mutex, whose own scripts
// queue, grant, renew and release it) and its leader record. The shared
// prelude is prepended before hashing.
var (
	ElectionBegin    = newScript(electionLibSrc + electionBeginSrc)
	ElectionProclaim = newScript(electionLibSrc + electionProclaimSrc)
	ElectionResign   = newScript(electionLibSrc + electionResignSrc)
	ElectionTouch    = newScript(electionLibSrc + electionTouchSrc)
	ElectionRead     = newScript(electionLibSrc + electionReadSrc)
)
