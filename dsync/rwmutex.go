package dsync

import (
	"context"
	"sync"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// An RWMutex is a reader/writer lock shared by every Client, in any process,
// that uses the same key prefix and name. Admission is phase-fair: writers
// are served in arrival order; once a writer waits, new readers wait behind
// it, as with sync.RWMutex; a writer's release admits the readers waiting
// before any later writer. The only reader may take the write lock (an
// upgrade); an owner holding the write lock may take the read lock and keep
// it after releasing the write lock (a downgrade). Each hold has its own
// lease. Tokens grow across both modes. Lock, Unlock, RLock and RUnlock
// follow sync.RWMutex.
//
// An RWMutex is safe for concurrent use. Its zero value is not usable;
// create RWMutexes with Client.NewRWMutex. An RWMutex may be copied only
// before first use.
type RWMutex struct {
	w, r qlock

	wlk lockerHolds // the write hold taken by Lock or TryLock
	rlk lockerHolds // the read holds taken by RLock or TryRLock
}

// NewRWMutex returns the rw mutex called name. An invalid name makes every
// call fail with ErrInvalidArgument.
func (c *Client) NewRWMutex(name string, opts ...LockOption) *RWMutex {
	key := c.lockKey("rw", name)
	keys := scripts.RWKeys(key)
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
	x := scripts.RWAcquireCall(p.keys, a.marker, p.mode, a.owner, p.lease, p.clientLease, a.try, p.wch, a.wid, a.check)
	return p.c.execAcquire(ctx, lc, x.Script, x.Keys, x.Args)
}

func (p *rwProto) leave(ctx context.Context, owner, wid string) error {
	return p.c.run(ctx, scripts.RWLeaveCall(p.keys, p.mode, owner, wid, p.lease, p.wch)).Error()
}

func (p *rwProto) release(owner string, token uint64) scripts.Call {
	return scripts.RWReleaseCall(p.keys, p.mode, owner, token, p.wch)
}

func (p *rwProto) retryRelease() bool { return false }

func (p *rwProto) undo(owner, marker string, fresh bool) scripts.Call {
	if fresh {
		return scripts.RWUndoFreshCall(p.keys, marker, p.mode, owner, p.wch)
	}
	return scripts.RWUndoCall(p.keys, marker, p.mode, owner, p.wch)
}

func (p *rwProto) renew(owner string, token uint64) (*rueidis.Lua, []string, []string, bool) {
	return scripts.RWRenewMany, p.keys, scripts.AppendRWRenewManyArgs(nil, p.mode, owner, token), true
}

func (p *rwProto) closing(*hold) (scripts.Call, bool) {
	return scripts.Call{}, false
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

// RLock acquires a read lock, blocking until it is held, as Mutex.Lock does.
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

// LockContext acquires the write lock for the owner ctx carries, as
// Mutex.LockContext does.
func (rw *RWMutex) LockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := rw.w.lock(ctx, false)
	return lctx, err
}

// TryLockContext is LockContext without waiting: when rw is held by others
// or writers are queued, it returns false and a nil error.
func (rw *RWMutex) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return rw.w.lock(ctx, true)
}

// RLockContext acquires a read lock for the owner ctx carries, as
// Mutex.LockContext does. An owner that already holds the read or the write
// lock gets it at once.
func (rw *RWMutex) RLockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := rw.r.lock(ctx, false)
	return lctx, err
}

// TryRLockContext is RLockContext without waiting: when a read lock cannot
// be had at once it returns false and a nil error.
func (rw *RWMutex) TryRLockContext(ctx context.Context) (context.Context, bool, error) {
	return rw.r.lock(ctx, true)
}

// UnlockContext releases one write acquisition by the owner ctx carries, as
// Mutex.UnlockContext does.
func (rw *RWMutex) UnlockContext(ctx context.Context) error { return rw.w.unlock(ctx) }

// RUnlockContext releases one read acquisition by the owner ctx carries, as
// Mutex.UnlockContext does.
func (rw *RWMutex) RUnlockContext(ctx context.Context) error { return rw.r.unlock(ctx) }
