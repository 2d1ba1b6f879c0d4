package scripts

import _ "embed"

var (
	//go:embed cond_lib.lua
	condLibSrc string
	//go:embed cond_wait.lua
	condWaitSrc string
	//go:embed cond_check.lua
	condCheckSrc string
	//go:embed cond_leave.lua
	condLeaveSrc string
	//go:embed cond_signal.lua
	condSignalSrc string
)

// The Cond's scripts: its waiters queue in arrival order with a place
// under a lease, like a fair queue's.
var (
	CondWait   = newScript(condLibSrc + condWaitSrc)
	CondCheck  = newScript(condLibSrc + condCheckSrc)
	CondLeave  = newScript(condLibSrc + condLeaveSrc)
	CondSignal = newScript(condLibSrc + condSignalSrc)
)
