package dsync

import (
	"context"
	"strconv"
	"sync"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// An RWMutex is a reader/writer lock shared by every Client, in any process,
// that uses the same key prefix and name: any number of readers, or one
// writer.
//
// Admission is phase-fair, so neither side starves:
//   - Waiting writers are served in arrival order, and once a writer waits,
//     new readers wait behind it (as with sync.RWMutex, whose RLock blocks
//     while a writer waits).
//   - When a writer releases, the readers that were waiting are granted
//     their read locks before any later writer (as sync.RWMutex's Unlock
//     admits the readers blocked behind it); the next writer is granted the
//     lock when they have left. Readers that arrive after that release
//     wait for the next one. A grant is made by the release itself and
//     told to each grantee on a channel its Client subscribes once.
//   - The only reader may take the write lock (an upgrade) ahead of queued
//     writers, which could not get in before it leaves anyway; with other
//     readers, the upgrade waits until it is the only reader left, and is
//     then granted ahead of the queue. sync.RWMutex has no upgrade.
//   - An owner holding the write lock may take the read lock, then release
//     the write lock and keep reading (a downgrade). A read lock taken with
//     the write lock's context is based on the context the write lock was
//     taken with, not on the write lock context, so releasing the write lock
//     does not end it.
//
// Each hold, read or write, has its own lease, renewed only by its own
// Client's watchdog (unless WithLeaseTime is given), so a crashed reader's
// hold lapses within one lease however long the other readers keep theirs.
// A waiting reader or writer whose process dies drops out within one lease;
// one whose context ends leaves at once. Both locks are reentrant by owner.
// Every acquisition gets a fencing token; tokens grow across both modes.
//
// Lock, Unlock, RLock and RUnlock follow sync.RWMutex: each call takes a
// fresh owner, so a second Lock blocks until Unlock, and any goroutine may
// call Unlock or RUnlock.
//
// An RWMutex is safe for concurrent use. Its zero value is not usable;
// create RWMutexes with Client.NewRWMutex. An RWMutex may be copied only
// before first use.
type RWMutex struct {
	w, r qlock

	wlk lockerHolds // the write hold taken by Lock or TryLock
	rlk lockerHolds // the read holds taken by RLock or TryRLock
}

// NewRWMutex returns the rw mutex called name. An invalid name (empty, or
// longer than MaxNameLen) makes every call fail with ErrInvalidArgument.
func (c *Client) NewRWMutex(name string, opts ...LockOption) *RWMutex {
	key := c.lockKey("rw", name)
	keys := []string{key, key + ":readers", key + ":queue", key + ":places", key + ":rwait", key + ":radmit"}
	lc := newLockConfig(opts)
	lease := lc.lease(c)
	// Every wait of this Client, read or write, is told of its grant on
	// one channel (see rw_lib.lua), subscribed while the Client waits.
	wch := key + ":w:"
	mk := func(mode string) qlock {
		// Both wait in Redis: writers in the queue, readers as registered
		// waiters granted at the next write release (phase-fair), so both
		// leave at once when their wait ends.
		p := &rwProto{c: c, mode: mode, keys: keys, key: key, wch: wch, ch: wch + c.id[:16],
			lease: leaseMS(lease), clientLease: leaseMS(c.cfg.lease)}
		q := qlock{c: c, info: Lock{Kind: KindRWMutex, Name: name, Mode: mode, N: 1}, err: checkName(name), lc: lc, p: p, base: key}
		if mode == "write" {
			q.rwWrite = key
		} else {
			q.rwRead = key
		}
		return q
	}
	return &RWMutex{w: mk("write"), r: mk("read")}
}

// rwProto is the qproto of an RWMutex's write or read lock (rw_acquire.lua
// and its siblings, with the mode as their first argument).
type rwProto struct {
	c    *Client
	mode string // "write" or "read"
	keys []string
	key  string
	// wch is the prefix of the Clients' grant channels, ch this Client's.
	wch, ch            string
	lease, clientLease string // ms: the lock's, the Client's (a place's)
}

// slot: one write hold per Client, one read hold per owner and Client;
// the slot names keep these apart from every real key.
func (p *rwProto) slot(owner string) stateKey {
	if p.mode == "write" {
		return stateKey{key: p.key, slot: "w"}
	}
	return stateKey{key: p.key, slot: "r", owner: owner}
}

func (p *rwProto) channel() string { return p.ch }

func (p *rwProto) step(ctx context.Context, lc *lockConfig, a stepArgs) ([]int64, error) {
	args := []string{p.mode, a.owner, p.lease, p.clientLease, flag(a.try), p.wch, a.wid}
	if a.check {
		args = append(args, "check")
	}
	return p.c.execAcquire(ctx, lc, scripts.RWAcquire, withMarker(p.keys, a.marker), args)
}

func (p *rwProto) leave(ctx context.Context, owner, wid string) error {
	m := owner + " " + wid + " " + p.lease // as rw_acquire.lua queues it
	return p.c.lua(scripts.RWLeave).Exec(ctx, p.c.rc, p.keys, []string{p.mode, m, p.wch}).Error()
}

func (p *rwProto) release(owner string, token uint64) (*rueidis.Lua, rueidis.LuaExec) {
	args := []string{p.mode, owner, strconv.FormatUint(token, 10), "", p.wch}
	return scripts.RWRelease, rueidis.LuaExec{Keys: p.keys, Args: args}
}

func (p *rwProto) retryRelease() bool { return false }

func (p *rwProto) undo(fresh bool) *rueidis.Lua {
	if fresh {
		return scripts.RWUndoFresh
	}
	return scripts.RWUndo
}

func (p *rwProto) renew(owner string, token uint64) (*rueidis.Lua, []string, []string, bool) {
	return scripts.RWRenewMany, p.keys, []string{p.mode, owner, strconv.FormatUint(token, 10)}, true
}

func (p *rwProto) closing(*hold) (*rueidis.Lua, rueidis.LuaExec, bool) {
	return nil, rueidis.LuaExec{}, false
}

// Lock acquires the write lock, blocking until it is held, as Mutex.Lock
// does.
func (rw *RWMutex) Lock() { lockerLock(&rw.w, &rw.wlk) }

// TryLock tries to take the write lock without waiting and reports whether
// it did. It returns false on any error.
func (rw *RWMutex) TryLock() bool { return lockerTryLock(&rw.w, &rw.wlk) }

// Unlock releases the write lock taken by Lock or TryLock. It is a run-time
// error (a panic) if rw is not write-locked by Lock or TryLock.
func (rw *RWMutex) Unlock() { lockerUnlock(&rw.w, &rw.wlk, "unlock") }

// RLock acquires a read lock, blocking until it is held. Redis errors do
// not end the wait; RLock panics if the Client is closed or the name is
// invalid.
func (rw *RWMutex) RLock() { lockerLock(&rw.r, &rw.rlk) }

// TryRLock tries to take a read lock without waiting and reports whether it
// did. It returns false on any error.
func (rw *RWMutex) TryRLock() bool { return lockerTryLock(&rw.r, &rw.rlk) }

// RUnlock undoes one RLock or TryRLock, the latest first. It is a run-time
// error (a panic) if rw holds no read lock taken by RLock or TryRLock.
func (rw *RWMutex) RUnlock() { lockerUnlock(&rw.r, &rw.rlk, "RUnlock") }

// RLocker returns a sync.Locker that implements Lock and Unlock by calling
// rw.RLock and rw.RUnlock.
func (rw *RWMutex) RLocker() sync.Locker { return (*rlocker)(rw) }

type rlocker RWMutex

func (r *rlocker) Lock()   { (*RWMutex)(r).RLock() }
func (r *rlocker) Unlock() { (*RWMutex)(r).RUnlock() }

// LockContext acquires the write lock for the owner ctx carries (a fresh
// one if none), waiting until it is held or ctx is done; it returns the
// lock context, as Mutex.LockContext does. A wait ended by ctx returns an
// error for which errors.Is(err, ctx.Err()) holds, and leaves the writer
// queue at once.
func (rw *RWMutex) LockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := rw.w.lock(ctx, false)
	return lctx, err
}

// TryLockContext is LockContext without waiting: when rw is held by others
// or writers are queued, it returns false and a nil error.
func (rw *RWMutex) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return rw.w.lock(ctx, true)
}

// RLockContext acquires a read lock for the owner ctx carries (a fresh one
// if none), waiting while another owner holds the write lock or a writer is
// queued (until the next write release admits it; see RWMutex), until ctx
// is done. An owner that already holds the read lock, or the write lock,
// gets it at once; with the write lock's context it gets a read lock that
// outlives the write lock (a downgrade).
func (rw *RWMutex) RLockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := rw.r.lock(ctx, false)
	return lctx, err
}

// TryRLockContext is RLockContext without waiting: when a read lock cannot
// be had at once it returns false and a nil error.
func (rw *RWMutex) TryRLockContext(ctx context.Context) (context.Context, bool, error) {
	return rw.r.lock(ctx, true)
}

// UnlockContext releases one write acquisition by the owner ctx carries. It
// returns ErrNotHeld if that owner does not hold the write lock, and
// ErrWrongContext (an ErrNotHeld) if ctx carries no hold of rw at all.
func (rw *RWMutex) UnlockContext(ctx context.Context) error { return rw.w.unlock(ctx) }

// RUnlockContext releases one read acquisition by the owner ctx carries. It
// returns ErrNotHeld if that owner does not hold a read lock, and
// ErrWrongContext (an ErrNotHeld) if ctx carries no hold of rw at all.
func (rw *RWMutex) RUnlockContext(ctx context.Context) error { return rw.r.unlock(ctx) }
