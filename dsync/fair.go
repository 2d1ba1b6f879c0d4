package dsync

import (
	"context"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A FairMutex is a Mutex granted in arrival order across every Client and
// process using the same key prefix and name. A waiter that dies drops out
// of the queue within one lease of its last look at the lock; if a release
// granted it the lock before then, the lock comes back a lease after the
// grant (up to two leases after the waiter's death). TryLock fails while
// others wait, even when the lock is free.
//
// A FairMutex is safe for concurrent use. Its zero value is not usable;
// create FairMutexes with Client.NewFairMutex. A FairMutex may be copied
// only before first use.
type FairMutex struct {
	q qlock

	lk lockerHolds // the hold taken by Lock or TryLock
}

// NewFairMutex returns the fair mutex called name. An invalid name makes
// every call fail with ErrInvalidArgument.
func (c *Client) NewFairMutex(name string, opts ...LockOption) *FairMutex {
	key := c.lockKey("fair", name)
	lc := newLockConfig(opts)
	lease := lc.lease(c)
	// Every wait of this Client is told of its grant on one channel (see
	// fair_lib.lua), which stays subscribed while the Client waits.
	wch := key + ":w:"
	p := &fairProto{c: c, keys: scripts.FairKeys(key), key: key,
		wch: wch, ch: wch + c.id[:16], lease: leaseMS(lease), clientLease: leaseMS(c.cfg.lease)}
	return &FairMutex{q: qlock{c: c, info: Lock{Kind: KindFairMutex, Name: name, N: 1}, err: checkName(name), lc: lc, p: p, base: key}}
}

// fairProto is a FairMutex's qproto (fair_acquire.lua and its siblings).
type fairProto struct {
	c    *Client
	keys []string // scripts.FairKeys
	key  string
	// wch is the prefix of the Clients' grant channels, ch this Client's.
	wch, ch            string
	lease, clientLease string // ms: the lock's, the Client's (a place's)
}

func (p *fairProto) slot(string) stateKey { return stateKey{key: p.key} }

func (p *fairProto) channel() string { return p.ch }

func (p *fairProto) step(ctx context.Context, lc *lockConfig, a stepArgs) ([]int64, error) {
	x := scripts.FairAcquireCall(p.keys, a.marker, a.owner, p.lease, p.clientLease, a.try, p.wch, a.wid, a.check)
	return p.c.execAcquire(ctx, lc, x.Script, x.Keys, x.Args)
}

func (p *fairProto) leave(ctx context.Context, owner, wid string) error {
	return p.c.run(ctx, scripts.FairLeaveCall(p.keys, owner, wid, p.lease, p.wch, leaseMS(freeMarkerTTL))).Error()
}

func (p *fairProto) release(owner string, token uint64) scripts.Call {
	return scripts.FairReleaseCall(p.keys, owner, token, leaseMS(freeMarkerTTL), p.wch)
}

func (p *fairProto) retryRelease() bool { return true }

func (p *fairProto) undo(owner, marker string, fresh bool) scripts.Call {
	if fresh {
		return scripts.FairUndoFreshCall(p.keys, marker, owner, leaseMS(freeMarkerTTL), p.wch)
	}
	return scripts.FairUndoCall(p.keys, marker, owner, leaseMS(freeMarkerTTL), p.wch)
}

// renew: the lock value has the mutex's layout.
func (p *fairProto) renew(string, uint64) (*rueidis.Lua, []string, []string, bool) {
	return nil, nil, nil, false
}

func (p *fairProto) closing(*hold) (scripts.Call, bool) {
	return scripts.Call{}, false
}

// Lock acquires f, blocking until it is held, as Mutex.Lock does.
func (f *FairMutex) Lock() { lockerLock(&f.q, &f.lk) }

// TryLock tries to acquire f without waiting and reports whether it did. It
// returns false on any error, and while others wait.
func (f *FairMutex) TryLock() bool { return lockerTryLock(&f.q, &f.lk) }

// Unlock releases the hold taken by Lock or TryLock. It is a run-time error
// (a panic) if f was not locked by Lock or TryLock.
func (f *FairMutex) Unlock() {
	lockerUnlock(&f.q, &f.lk, "unlock")
}

// LockContext acquires f for the owner ctx carries, waiting in the queue
// until its turn, as Mutex.LockContext does.
func (f *FairMutex) LockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := f.q.lock(ctx, false)
	return lctx, err
}

// TryLockContext is LockContext without waiting: when f is held, or others
// wait for it, it returns false and a nil error.
func (f *FairMutex) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return f.q.lock(ctx, true)
}

// UnlockContext releases one acquisition by the owner ctx carries, as
// Mutex.UnlockContext does; the last one grants the lock to the next waiter.
func (f *FairMutex) UnlockContext(ctx context.Context) error { return f.q.unlock(ctx) }
