package scripts

import _ "embed"

var (
	//go:embed rw_lib.lua
	rwLibSrc string
	//go:embed rw_acquire.lua
	rwAcquireSrc string
	//go:embed rw_release.lua
	rwReleaseSrc string
	//go:embed rw_renew.lua
	rwRenewSrc string
	//go:embed rw_leave.lua
	rwLeaveSrc string
)

// The rw mutex's scripts, each prefixed with the fair-queue and rw preludes.
var (
	RWAcquire = newScript(fairLibSrc + rwLibSrc + rwAcquireSrc)
	RWRelease = newScript(fairLibSrc + rwLibSrc + rwReleaseSrc)
	RWRenew   = newScript(fairLibSrc + rwLibSrc + rwRenewSrc)
	RWLeave   = newScript(fairLibSrc + rwLibSrc + rwLeaveSrc)
	// RWUndo is RWRelease behind an attempt marker (mutex_undo.lua).
	RWUndo = newScript(fairLibSrc + rwLibSrc + mutexUndoSrc + rwReleaseSrc)
	// RWUndoFresh is RWRelease behind a fresh owner's mark.
	RWUndoFresh = newScript(fairLibSrc + rwLibSrc + mutexUndoFreshSrc + rwReleaseSrc)
)
