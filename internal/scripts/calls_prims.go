package scripts

import (
	"strconv"

	"github.com/redis/rueidis"
)

// The calls of every primitive but the Mutex: FairMutex, RWMutex,
// Semaphore, Once, Group, WaitGroup, Election and Cond. A primitive whose
// scripts all take one key list has a keys builder named after it
// (FairKeys, RWKeys, ...), which it calls once per instance; its calls'
// builders take that list as keys. Durations are in ms, as the primitive
// formatted them once (strings it keeps); the rest is formatted here.
// RWRenew, SemRenew, OnceRenew and ElectionTouch have no builder: dsync
// renews in batches only (their *Many forms).

// withMarker returns keys with an attempt marker appended, if there is one,
// in a new slice (keys is shared by the primitive's calls).
func withMarker(keys []string, marker string) []string {
	if marker == "" {
		return keys
	}
	return append(keys[:len(keys):len(keys)], marker)
}

// flag is a script's "1" (true) or "0" argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// queueMember is the name of a wait in a fair queue, "<owner> <wid> <lease
// ms>", as fair_acquire.lua and rw_acquire.lua queue it (fair_lib.lua).
func queueMember(owner, wid, lease string) string {
	return owner + " " + wid + " " + lease
}

// FairKeys returns the keys of the fair mutex whose lock key is key, in the
// order every fair script takes them (fair_acquire.lua, fair_release.lua,
// fair_leave.lua): the lock, its queue list, the places of its waiters. A
// FairMutex builds them once; its calls share them.
func FairKeys(key string) []string {
	return []string{key, key + ":queue", key + ":places"}
}

// FairAcquireCall is one attempt of owner to acquire, re-enter or queue for
// the fair mutex of keys (FairKeys; fair_acquire.lua). marker is the
// attempt's marker key, in which the script records the acquisition for
// FairUndoCall ("" for none); check: the script only checks it, never
// writes it (an owner made for this one call: FairUndoFreshCall). lease is
// the lock's lease and placeLease a queue place's, in ms; try: an attempt
// that never queues. channel is the prefix of the Clients' grant channels;
// wid names the wait in the queue.
func FairAcquireCall(keys []string, marker, owner, lease, placeLease string, try bool, channel, wid string, check bool) Call {
	args := []string{owner, lease, placeLease, flag(try), channel, wid, "check"}
	if !check {
		args = args[:6]
	}
	return Call{FairAcquire, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: args}}
}

// FairReleaseCall releases one hold of owner of the fair mutex of keys
// (FairKeys), the one with token (0: any hold of owner), and grants the
// lock to the next waiter after the last one (fair_release.lua). freeLife
// is how long the free marker a release leaves lives, in ms; channel the
// prefix of the Clients' grant channels.
func FairReleaseCall(keys []string, owner string, token uint64, freeLife, channel string) Call {
	return Call{FairRelease, rueidis.LuaExec{Keys: keys, Args: fairReleaseArgs(owner, token, freeLife, channel)}}
}

func fairReleaseArgs(owner string, token uint64, freeLife, channel string) []string {
	return []string{owner, strconv.FormatUint(token, 10), freeLife, channel}
}

// FairLeaveCall takes the wait wid of owner, queued with lease (ms) by
// FairAcquireCall, out of the queue of the fair mutex of keys (FairKeys),
// and releases a grant it was given meanwhile (fair_leave.lua). channel is
// the prefix of the Clients' grant channels, freeLife the free marker's
// lifetime in ms.
func FairLeaveCall(keys []string, owner, wid, lease, channel, freeLife string) Call {
	return Call{FairLeave, rueidis.LuaExec{Keys: keys, Args: []string{queueMember(owner, wid, lease), channel, freeLife}}}
}

// FairUndoCall undoes the acquisition of the attempt of owner with marker
// (FairAcquireCall's) if and only if the attempt's script ran: then it
// releases one hold of owner as FairReleaseCall with token 0 does
// (mutex_undo.lua, fair_release.lua). It can be repeated.
func FairUndoCall(keys []string, marker, owner, freeLife, channel string) Call {
	return Call{FairUndo, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: fairReleaseArgs(owner, 0, freeLife, channel)}}
}

// FairUndoFreshCall is FairUndoCall for an owner made for one call (an
// attempt with check): it marks the attempt undone first, so that an
// attempt still on its way does nothing, then releases what owner holds
// (mutex_undo_fresh.lua, fair_release.lua).
func FairUndoFreshCall(keys []string, marker, owner, freeLife, channel string) Call {
	return Call{FairUndoFresh, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: fairReleaseArgs(owner, 0, freeLife, channel)}}
}

// RWKeys returns the keys of the rw mutex whose lock key is key, in the
// order every rw script takes them (rw_lib.lua): the lock hash, the reader
// leases, the writer queue and its places, the waiting readers, and one
// unused. An RWMutex builds them once; the calls of both its modes share
// them.
func RWKeys(key string) []string {
	return []string{key, key + ":readers", key + ":queue", key + ":places", key + ":rwait", key + ":radmit"}
}

// RWAcquireCall is one attempt of owner to acquire or re-enter the read or
// the write lock (mode "read" or "write") of the rw mutex of keys (RWKeys),
// or to wait for a grant (rw_acquire.lua). The other parameters are those
// of FairAcquireCall.
func RWAcquireCall(keys []string, marker, mode, owner, lease, placeLease string, try bool, channel, wid string, check bool) Call {
	args := []string{mode, owner, lease, placeLease, flag(try), channel, wid, "check"}
	if !check {
		args = args[:7]
	}
	return Call{RWAcquire, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: args}}
}

// RWReleaseCall releases one hold of owner in mode ("read" or "write") of
// the rw mutex of keys (RWKeys), the one with token (0: any hold of owner
// in mode), and passes the lock on after the last one (rw_release.lua).
// channel is the prefix of the Clients' grant channels.
func RWReleaseCall(keys []string, mode, owner string, token uint64, channel string) Call {
	return Call{RWRelease, rueidis.LuaExec{Keys: keys, Args: rwReleaseArgs(mode, owner, token, channel)}}
}

func rwReleaseArgs(mode, owner string, token uint64, channel string) []string {
	return []string{mode, owner, strconv.FormatUint(token, 10), "", channel} // ARGV[4] unused
}

// RWLeaveCall takes the wait wid of owner in mode, queued with lease (ms)
// by RWAcquireCall, out of the rw mutex of keys (RWKeys), passing the lock
// on if that lets someone in, and releases a grant it was given meanwhile
// (rw_leave.lua). channel is the prefix of the Clients' grant channels.
func RWLeaveCall(keys []string, mode, owner, wid, lease, channel string) Call {
	return Call{RWLeave, rueidis.LuaExec{Keys: keys, Args: []string{mode, queueMember(owner, wid, lease), channel}}}
}

// RWUndoCall undoes the acquisition of the attempt of owner in mode with
// marker (RWAcquireCall's) if and only if the attempt's script ran: then it
// releases one hold as RWReleaseCall with token 0 does (mutex_undo.lua,
// rw_release.lua). It can be repeated.
func RWUndoCall(keys []string, marker, mode, owner, channel string) Call {
	return Call{RWUndo, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: rwReleaseArgs(mode, owner, 0, channel)}}
}

// RWUndoFreshCall is RWUndoCall for an owner made for one call (an attempt
// with check): it marks the attempt undone first, then releases what owner
// holds in mode (mutex_undo_fresh.lua, rw_release.lua).
func RWUndoFreshCall(keys []string, marker, mode, owner, channel string) Call {
	return Call{RWUndoFresh, rueidis.LuaExec{Keys: withMarker(keys, marker), Args: rwReleaseArgs(mode, owner, 0, channel)}}
}

// AppendRWRenewManyArgs appends to dst the arguments one hold adds to a
// batch of RWRenewMany (rw_renew_many.lua): its mode ("read" or "write"),
// owner and token. The hold's keys in the batch are its RWKeys; the
// batch's first argument is the lease in ms.
func AppendRWRenewManyArgs(dst []string, mode, owner string, token uint64) []string {
	return append(dst, mode, owner, strconv.FormatUint(token, 10))
}

// SemKeys returns the keys of the semaphore whose key is base, in the order
// every semaphore script takes them (sem_common.lua). A Semaphore builds
// them once; its calls share them.
func SemKeys(base string) []string {
	return []string{base, base + ":holders", base + ":waiters", base + ":want", base + ":undone"}
}

// SemAcquireCalls are the attempts of one Acquire call of owner for n
// permits of the semaphore of keys (SemKeys) with size permits
// (sem_acquire.lua): first the call's first attempt, again each later one
// (only a first attempt skips the look for a grant); the two share one
// allocation. waiter names the call's acquisition, in the queue and in its
// grant; lease is the hold's lease and placeLease a queue place's, in ms;
// try: the attempts never queue; channel is the prefix of the Clients'
// grant channels.
func SemAcquireCalls(keys []string, owner, waiter string, n, size int64, lease string, try bool, channel, placeLease string) (first, again Call) {
	mode := "wait"
	if try {
		mode = "try"
	}
	const argc = 9
	args := make([]string, 2*argc)
	args[0], args[1], args[2], args[3] = owner, waiter, strconv.FormatInt(n, 10), strconv.FormatInt(size, 10)
	args[4], args[5], args[6], args[7], args[8] = lease, mode, channel, placeLease, "first"
	copy(args[argc:], args[:argc-1])
	args[2*argc-1] = "again"
	return Call{SemAcquire, rueidis.LuaExec{Keys: keys, Args: args[:argc:argc]}},
		Call{SemAcquire, rueidis.LuaExec{Keys: keys, Args: args[argc:]}}
}

// SemMember is the name Redis gives the acquisition of n permits by owner
// with token in the call waiter ("<owner> <token> <waiter> <permits>", as
// sem_acquire.lua records it): AppendSemRenewManyArgs's member.
func SemMember(owner string, token uint64, waiter string, n int64) string {
	return owner + " " + strconv.FormatUint(token, 10) + " " + waiter + " " + strconv.FormatInt(n, 10)
}

// SemReleaseCall releases n permits of owner of the semaphore of keys
// (SemKeys) with size permits, the acquisition with token first (0: none
// in particular), and grants them to the waiters that now fit
// (sem_release.lua). channel is the prefix of the Clients' grant channels.
// exact: the release is sent again after its reply was lost, and releases
// the acquisition with token, of n permits, or nothing.
func SemReleaseCall(keys []string, owner string, n int64, channel string, size int64, token uint64, exact bool) Call {
	args := []string{owner, strconv.FormatInt(n, 10), channel, strconv.FormatInt(size, 10), strconv.FormatUint(token, 10), "exact"}
	if !exact {
		args = args[:5]
	}
	return Call{SemRelease, rueidis.LuaExec{Keys: keys, Args: args}}
}

// AppendSemRenewManyArgs appends to dst the arguments one acquisition adds
// to a batch of SemRenewMany (sem_renew_many.lua): its member (SemMember)
// and the prefix of its semaphore's grant channels. Its keys in the batch
// are its semaphore's SemKeys; the batch's first argument is the lease in
// ms.
func AppendSemRenewManyArgs(dst []string, member, channel string) []string {
	return append(dst, member, channel)
}

// SemUndoCall takes back the Acquire call waiter on the semaphore of keys
// (SemKeys): its queue place, and the permits it was granted, if any, and
// remembers the call as undone for remember ms, so that an attempt still on
// its way does nothing (sem_undo.lua). channel is the prefix of the
// Clients' grant channels. It can be repeated.
func SemUndoCall(keys []string, waiter, channel, remember string) Call {
	return Call{SemUndo, rueidis.LuaExec{Keys: keys, Args: []string{waiter, channel, remember}}}
}

// OnceKeys are the keys of a Once (once_begin.lua): State its state hash,
// Run its run key, Channel the channel a run's end is published on, and
// the lists of its scripts, which take different ones. A Once builds them
// once (NewOnceKeys); its calls share them.
type OnceKeys struct {
	State, Run, Channel string

	begin, end, undo []string
}

// NewOnceKeys returns the keys of the Once whose state hash is base.
func NewOnceKeys(base string) OnceKeys {
	run, ch := base+":run", base+":ch"
	undone := run + ":undone"
	return OnceKeys{State: base, Run: run, Channel: ch,
		begin: []string{base, run, undone}, end: []string{base, run, ch}, undo: []string{base, run, undone, ch}}
}

// OnceBeginCall starts a run of the Once of keys for owner, with a lease
// in ms, unless it is done or running (once_begin.lua). call names the Do
// call (one per call): a begin of a call undone (OnceUndoCall) does
// nothing.
func OnceBeginCall(keys OnceKeys, owner, lease, call string) Call {
	return Call{OnceBegin, rueidis.LuaExec{Keys: keys.begin, Args: []string{owner, lease, call}}}
}

// OnceEndCall ends the run of the Once of keys whose running marker is
// mark ("<owner> <token> <call>"): outcome "ok" records val as its result,
// "fail" gives the next caller its turn; either way the waiters are woken
// (once_end.lua).
func OnceEndCall(keys OnceKeys, mark, outcome, val string) Call {
	return Call{OnceEnd, rueidis.LuaExec{Keys: keys.end, Args: []string{mark, outcome, val}}}
}

// OnceUndoCall takes back the Do call named call of the Once of keys: it
// remembers the call as undone for remember ms, so that a begin still on
// its way does nothing, and ends the run it started, if any
// (once_undo.lua). It can be repeated.
func OnceUndoCall(keys OnceKeys, call, remember string) Call {
	return Call{OnceUndo, rueidis.LuaExec{Keys: keys.undo, Args: []string{call, remember}}}
}

// AppendOnceRenewManyArgs appends to dst the argument one run of a Once or
// of a Group's key adds to a batch of OnceRenewMany (once_renew_many.lua):
// its running marker mark ("<owner> <token> <call>"). The run's key in the
// batch is its run key alone; the batch's first argument is the lease in
// ms.
func AppendOnceRenewManyArgs(dst []string, mark string) []string {
	return append(dst, mark)
}

// GroupKeys returns the keys of the record of key of the Group whose index
// is base, in the order every Group script takes them (group_lib.lua): its
// state hash, run key, undone calls, wakeup channel, waiters, and the
// Group's index. A Group builds them once per key it calls.
func GroupKeys(base, key string) []string {
	return []string{base + ":s:" + key, base + ":r:" + key, base + ":u:" + key, base + ":c:" + key, base + ":w:" + key, base}
}

// GroupBeginCall starts a run of key of a Group (keys: GroupKeys) for
// owner, with a lease in ms, waits for the run in progress, or takes the
// last one's result (group_begin.lua). call names this process's wait for
// key; resultTTL is how long a result is kept after its run, in ms ("0":
// only for the callers waiting for it).
func GroupBeginCall(keys []string, owner, lease, call, key, resultTTL string) Call {
	return Call{GroupBegin, rueidis.LuaExec{Keys: keys, Args: []string{owner, lease, call, key, resultTTL}}}
}

// GroupEndCall ends the run of key of a Group (keys: GroupKeys) whose
// running marker is mark ("<owner> <token> <call>"), with outcome "ok"
// (val is the result), "err" (val is the error message), "fail" (a waiter
// runs fn) or "gone" (a failure whose call does not wait on), and wakes the
// waiters (group_end.lua). resultTTL is GroupBeginCall's; lease, in ms, is
// how long a waiter may take to look.
func GroupEndCall(keys []string, mark, outcome, val, key, resultTTL, lease string) Call {
	return Call{GroupEnd, rueidis.LuaExec{Keys: keys, Args: []string{mark, outcome, val, key, resultTTL, lease}}}
}

// GroupUndoCall takes back the wait call of key of a Group (keys:
// GroupKeys): its place among the waiters, and, as OnceUndoCall does, the
// run it started, remembering the call as undone for remember ms
// (group_leave.lua, once_undo.lua). It can be repeated.
func GroupUndoCall(keys []string, call, remember, key string) Call {
	return Call{GroupUndo, rueidis.LuaExec{Keys: keys, Args: []string{call, remember, key}}}
}

// GroupLeaveCall takes the wait call of key of a Group (keys: GroupKeys)
// out of its record's waiters; a finished record nobody else waits for
// goes with it (group_leave.lua, group_left.lua).
func GroupLeaveCall(keys []string, call, key string) Call {
	return Call{GroupLeave, rueidis.LuaExec{Keys: keys, Args: []string{call, key}}}
}

// GroupForgetCall drops the record of key of a Group (keys: GroupKeys), so
// that the next call runs fn again, and wakes its waiters
// (group_forget.lua).
func GroupForgetCall(keys []string, key string) Call {
	return Call{GroupForget, rueidis.LuaExec{Keys: keys, Args: []string{key}}}
}

// WaitGroupAddCall adds delta to the WaitGroup whose keys are counter,
// channel (where its waiters are woken) and generation, waking the waiters
// when it reaches zero (wg_add.lua).
func WaitGroupAddCall(counter, channel, generation string, delta int64) Call {
	return Call{WaitGroupAdd, rueidis.LuaExec{Keys: []string{counter, channel, generation}, Args: []string{strconv.FormatInt(delta, 10)}}}
}

// ElectionKeys returns the keys of an election, in the order every
// election script takes them (election_lib.lua): its lock (a fair mutex's
// lock key) and its leader record. An Election builds them once; its calls
// share them.
func ElectionKeys(lock, record string) []string {
	return []string{lock, record}
}

// ElectionBeginCall begins the term of owner (term: the lock's fencing
// token) in the election of keys (ElectionKeys), whose lock owner has just
// acquired, with value (election_begin.lua). lifetime is the record's, in
// ms; channel is where every change is published.
func ElectionBeginCall(keys []string, owner string, term uint64, value, lifetime, channel string) Call {
	return Call{ElectionBegin, rueidis.LuaExec{Keys: keys, Args: electionValueArgs(owner, term, value, lifetime, channel)}}
}

// ElectionProclaimCall proclaims value in the term of owner in the election
// of keys (ElectionKeys; election_proclaim.lua); the other parameters are
// ElectionBeginCall's.
func ElectionProclaimCall(keys []string, owner string, term uint64, value, lifetime, channel string) Call {
	return Call{ElectionProclaim, rueidis.LuaExec{Keys: keys, Args: electionValueArgs(owner, term, value, lifetime, channel)}}
}

func electionValueArgs(owner string, term uint64, value, lifetime, channel string) []string {
	return []string{owner, strconv.FormatUint(term, 10), value, lifetime, channel}
}

// ElectionResignCall records the end of the term of owner in the election
// of keys (ElectionKeys), before its lock is released (election_resign.lua).
// lifetime is the record's, in ms; channel is where every change is
// published. It can be repeated.
func ElectionResignCall(keys []string, owner string, term uint64, lifetime, channel string) Call {
	return Call{ElectionResign, rueidis.LuaExec{Keys: keys, Args: []string{owner, strconv.FormatUint(term, 10), lifetime, channel}}}
}

// ElectionReadCall reads the election of keys (ElectionKeys): its lock and
// the changes after version seen, 0 for none (election_read.lua).
func ElectionReadCall(keys []string, seen uint64) Call {
	return Call{ElectionRead, rueidis.LuaExec{Keys: keys, Args: []string{strconv.FormatUint(seen, 10)}}}
}

// AppendElectionTouchManyArgs appends to dst the arguments one term adds to
// a batch of ElectionTouchMany (election_touch_many.lua): its owner, term
// and record lifetime in ms. The term's keys in the batch are its
// election's ElectionKeys; the batch's first argument is the lease in ms.
func AppendElectionTouchManyArgs(dst []string, owner string, term uint64, lifetime string) []string {
	return append(dst, owner, strconv.FormatUint(term, 10), lifetime)
}

// CondKeys returns the keys of the Cond whose waiters zset is base, in the
// order every Cond script takes them (cond_lib.lua): its waiters, their
// places, the signalled ones. A Cond builds them once; its calls share
// them.
func CondKeys(base string) []string {
	return []string{base, base + ":places", base + ":sig"}
}

// CondWaitCall registers waiter ("<client id>-<n>") of the Cond of keys
// (CondKeys), its place lasting lease ms (cond_wait.lua).
func CondWaitCall(keys []string, waiter, lease string) Call {
	return Call{CondWait, rueidis.LuaExec{Keys: keys, Args: []string{waiter, lease}}}
}

// CondCheckCall looks whether waiter of the Cond of keys (CondKeys) was
// signalled, and renews its place for lease ms (cond_check.lua).
func CondCheckCall(keys []string, waiter, lease string) Call {
	return Call{CondCheck, rueidis.LuaExec{Keys: keys, Args: []string{waiter, lease}}}
}

// CondLeaveCall takes waiter out of the Cond of keys (CondKeys); pass: a
// signal it was given passes on to the next waiter (cond_leave.lua). It
// can be repeated.
func CondLeaveCall(keys []string, waiter string, pass bool) Call {
	return Call{CondLeave, rueidis.LuaExec{Keys: keys, Args: []string{waiter, flag(pass)}}}
}

// CondSignalCall wakes the longest-waiting live waiter of the Cond of keys
// (CondKeys), or with all every waiter waiting now (cond_signal.lua).
func CondSignalCall(keys []string, all bool) Call {
	which := "one"
	if all {
		which = "all"
	}
	return Call{CondSignal, rueidis.LuaExec{Keys: keys, Args: []string{which}}}
}
