package scripts

// Every script of dsync, composed from the .lua files of
// this package by script: each file names the preludes it needs on its
// first line ("-- uses: lib fair_lib"), and script puts them (and theirs)
// before the bodies. lib.lua is what every lock script does: read the
// clock once, format a number, mint a fencing token.
var (
	// The mutex. Its undo scripts are its release behind an attempt
	// marker: MutexUndo releases an acquisition whose reply was lost only
	// if the acquire script ran (its marker is there); MutexUndoFresh, for
	// an owner made for one call, marks first, then releases whatever the
	// owner holds.
	MutexAcquire   = script("mutex_acquire.lua")
	MutexRelease   = script("mutex_release.lua")
	MutexHandoff   = script("mutex_handoff.lua")
	MutexRenew     = script("mutex_renew.lua")
	MutexUndo      = script("mutex_undo.lua", "mutex_release.lua")
	MutexUndoFresh = script("mutex_undo_fresh.lua", "mutex_release.lua")
	// MutexRenewMany is MutexRenew for many keys at once (of one slot, in
	// a cluster).
	MutexRenewMany = script("mutex_renew_many.lua")
	// MutexRenewSession is MutexRenewMany for a Client that keeps a
	// renewal session: it binds holds to the session (off a cluster).
	MutexRenewSession = script("mutex_renew_session.lua")
	// MutexReleaseMany is MutexRelease for many known holds at once (of
	// one slot, in a cluster): Client.Close's release.
	MutexReleaseMany = script("mutex_release_many.lua")
	// The other holds' batch forms, for the renewal loop: RWRenewMany,
	// SemRenewMany, OnceRenewMany (Once and Group runs), and
	// ElectionTouchMany (the records of Election terms).
	RWRenewMany       = script("rw_renew_many.lua")
	SemRenewMany      = script("sem_renew_many.lua")
	OnceRenewMany     = script("once_renew_many.lua")
	ElectionTouchMany = script("election_touch_many.lua")
	// MutexUnwait takes a Client that stopped waiting out of the waiting
	// count.
	MutexUnwait = script("mutex_unwait.lua")

	// The fair mutex. Its lock value has the mutex's format, so it is
	// renewed with MutexRenewMany.
	FairAcquire   = script("fair_acquire.lua")
	FairRelease   = script("fair_release.lua")
	FairLeave     = script("fair_leave.lua")
	FairUndo      = script("mutex_undo.lua", "fair_release.lua")
	FairUndoFresh = script("mutex_undo_fresh.lua", "fair_release.lua")

	// The rw mutex.
	RWAcquire   = script("rw_acquire.lua")
	RWRelease   = script("rw_release.lua")
	RWRenew     = script("rw_renew.lua")
	RWLeave     = script("rw_leave.lua")
	RWUndo      = script("mutex_undo.lua", "rw_release.lua")
	RWUndoFresh = script("mutex_undo_fresh.lua", "rw_release.lua")

	// The semaphore, Once and WaitGroup.
	SemAcquire   = script("sem_acquire.lua")
	SemRelease   = script("sem_release.lua")
	SemRenew     = script("sem_renew.lua")
	SemUndo      = script("sem_undo.lua")
	OnceBegin    = script("once_begin.lua")
	OnceEnd      = script("once_end.lua")
	OnceRenew    = script("once_renew.lua")
	OnceUndo     = script("once_undo.lua")
	WaitGroupAdd = script("wg_add.lua")

	// Client.Inspect and Client.ForceUnlock. InspectLock and ForceUnlock
	// read and reset the "<owner> <token> <count>" value shared by Mutex
	// and FairMutex; InspectOther reads the RWMutex, Semaphore, Once and
	// WaitGroup layouts; ForceRW, ForceSem and ForceOther release the holds
	// of the other primitives.
	InspectLock  = script("inspect_lock.lua")
	ForceUnlock  = script("force_unlock.lua")
	InspectOther = script("inspect_other.lua")
	ForceRW      = script("force_rw.lua")
	ForceSem     = script("force_sem.lua")
	ForceOther   = script("force_other.lua")

	// MutexLocalWaiters records how many goroutines of a Client wait for
	// a mutex in its local queue, for Inspect.
	MutexLocalWaiters = script("mutex_local_waiters.lua")
	// TagSync applies a Client's queued hold-tag changes for one lock
	// (see dsync's Observer.HoldTag): tags of holds that began, tags of
	// holds that ended removed and the holds recorded in the lock's
	// history, which waiters read when their wait ends.
	TagSync = script("tag_sync.lua")
	// TagSet writes or renews a hold's tag, each with its own expiry, and
	// prunes expired ones.
	TagSet = script("tag_set.lua")

	// The Election, on its lock (a fair mutex, whose own scripts queue,
	// grant, renew and release it) and its leader record.
	ElectionBegin    = script("election_begin.lua")
	ElectionProclaim = script("election_proclaim.lua")
	ElectionResign   = script("election_resign.lua")
	ElectionTouch    = script("election_touch.lua")
	ElectionRead     = script("election_read.lua")

	// The Group: each key is a run record like a Once's, with the waiters
	// counted so that it goes away when the last one has the result.
	// GroupUndo is the Once's undo after the Group's own cleanup; the
	// renewal is OnceRenew.
	GroupBegin  = script("group_begin.lua")
	GroupEnd    = script("group_end.lua")
	GroupUndo   = script("group_leave.lua", "once_undo.lua")
	GroupLeave  = script("group_leave.lua", "group_left.lua")
	GroupForget = script("group_forget.lua")

	// The Cond.
	CondWait   = script("cond_wait.lua")
	CondCheck  = script("cond_check.lua")
	CondLeave  = script("cond_leave.lua")
	CondSignal = script("cond_signal.lua")
)
