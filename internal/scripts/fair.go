package scripts

import _ "embed"

var (
	//go:embed fair_lib.lua
	fairLibSrc string
	//go:embed fair_acquire.lua
	fairAcquireSrc string
	//go:embed fair_release.lua
	fairReleaseSrc string
	//go:embed fair_leave.lua
	fairLeaveSrc string
)

// The fair mutex's scripts. Its lock value has the mutex's format, so it is
// renewed with MutexRenew. FairLeave serves every fair queue (also the
// RWMutex writer queue). The shared prelude is prepended before hashing.
var (
	FairAcquire = newScript(fairLibSrc + fairAcquireSrc)
	FairRelease = newScript(fairLibSrc + fairReleaseSrc)
	FairLeave   = newScript(fairLibSrc + fairLeaveSrc)
	// FairUndo is FairRelease behind an attempt marker (mutex_undo.lua).
	FairUndo = newScript(fairLibSrc + mutexUndoSrc + fairReleaseSrc)
	// FairUndoFresh is FairRelease behind a fresh owner's mark
	// (mutex_undo_fresh.lua).
	FairUndoFresh = newScript(fairLibSrc + mutexUndoFreshSrc + fairReleaseSrc)
)
