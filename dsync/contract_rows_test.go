package dsync_test

import (
	"context"
	"errors"
	"time"

	"github.com/dsync/dsync/dsync"
)

// The rows of the lock contract table (contract_test.go): every lock type
// seen through the same three calls.

// contractLock is one lock type's acquire, try and release, as a user calls
// them.
type contractLock interface {
	lock(ctx context.Context) (context.Context, error)
	// try does not wait: false and a nil error when another owner holds
	// the lock.
	try(ctx context.Context) (context.Context, bool, error)
	unlock(lctx context.Context) error
}

// contractRow is one lock type in the table.
type contractRow struct {
	name string
	// open returns the lock called name through c.
	open func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock
	// probe returns a lock that excludes every holder of open's lock of
	// the same name (the write side, for the read lock): what a second
	// Client takes to show that a lock is free.
	probe func(c *dsync.Client, name string) contractLock
	// reentrant: the same owner acquires again while it holds the lock.
	reentrant bool
	// tokens: the lock context carries a fencing token.
	tokens bool
}

func contractRows() []contractRow {
	self := func(open func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock) func(*dsync.Client, string) contractLock {
		return func(c *dsync.Client, name string) contractLock { return open(c, name) }
	}
	mutex := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return ctxLock{c.NewMutex(name, opts...)}
	}
	fair := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return ctxLock{c.NewFairMutex(name, opts...)}
	}
	rwWrite := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return rwWriteLock{c.NewRWMutex(name, opts...)}
	}
	rwRead := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return rwReadLock{c.NewRWMutex(name, opts...)}
	}
	sem := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return semLock{c.NewSemaphore(name, 1, opts...)}
	}
	red := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		// A node timeout well above a reply's time on a loaded test
		// machine: the default (100 ms) fails a round now and then
		// under -race, which is not what the table checks.
		opts = append([]dsync.LockOption{dsync.WithNodeTimeout(time.Second)}, opts...)
		return redLock{dsync.NewRedLock(name, []*dsync.Client{c}, opts...)}
	}
	multi := func(c *dsync.Client, name string, opts ...dsync.LockOption) contractLock {
		return multiLock{c.NewMultiLock([]string{name + "-a", name + "-b"}, opts...)}
	}
	return []contractRow{
		{name: "Mutex", open: mutex, probe: self(mutex), reentrant: true, tokens: true},
		{name: "FairMutex", open: fair, probe: self(fair), reentrant: true, tokens: true},
		{name: "RWMutexWrite", open: rwWrite, probe: self(rwWrite), reentrant: true, tokens: true},
		{name: "RWMutexRead", open: rwRead, probe: self(rwWrite), reentrant: true, tokens: true},
		// Permits add up per owner: a second Acquire(1) by the holder of
		// the only permit waits like anyone else's.
		{name: "Semaphore1", open: sem, probe: self(sem), reentrant: false, tokens: true},
		// No fencing token: each node counts its own (see RedLock).
		{name: "RedLock1", open: red, probe: self(red), reentrant: true, tokens: false},
		// No fencing token: each member has its own.
		{name: "MultiLock", open: multi, probe: self(multi), reentrant: true, tokens: false},
	}
}

// ctxLock is a Mutex or a FairMutex.
type ctxLock struct {
	l interface {
		dsync.ContextLocker
		TryLockContext(ctx context.Context) (context.Context, bool, error)
	}
}

func (l ctxLock) lock(ctx context.Context) (context.Context, error) { return l.l.LockContext(ctx) }
func (l ctxLock) try(ctx context.Context) (context.Context, bool, error) {
	return l.l.TryLockContext(ctx)
}
func (l ctxLock) unlock(ctx context.Context) error { return l.l.UnlockContext(ctx) }

type rwWriteLock struct{ rw *dsync.RWMutex }

func (l rwWriteLock) lock(ctx context.Context) (context.Context, error) { return l.rw.LockContext(ctx) }
func (l rwWriteLock) try(ctx context.Context) (context.Context, bool, error) {
	return l.rw.TryLockContext(ctx)
}
func (l rwWriteLock) unlock(ctx context.Context) error { return l.rw.UnlockContext(ctx) }

type rwReadLock struct{ rw *dsync.RWMutex }

func (l rwReadLock) lock(ctx context.Context) (context.Context, error) { return l.rw.RLockContext(ctx) }
func (l rwReadLock) try(ctx context.Context) (context.Context, bool, error) {
	return l.rw.TryRLockContext(ctx)
}
func (l rwReadLock) unlock(ctx context.Context) error { return l.rw.RUnlockContext(ctx) }

// semLock is a Semaphore taken one permit at a time.
type semLock struct{ s *dsync.Semaphore }

func (l semLock) lock(ctx context.Context) (context.Context, error) { return l.s.Acquire(ctx, 1) }
func (l semLock) try(ctx context.Context) (context.Context, bool, error) {
	return l.s.TryAcquire(ctx, 1)
}
func (l semLock) unlock(ctx context.Context) error { return l.s.Release(ctx, 1) }

type redLock struct{ rl *dsync.RedLock }

func (l redLock) lock(ctx context.Context) (context.Context, error) { return l.rl.LockContext(ctx) }
func (l redLock) try(ctx context.Context) (context.Context, bool, error) {
	return l.rl.TryLockContext(ctx)
}
func (l redLock) unlock(ctx context.Context) error { return l.rl.UnlockContext(ctx) }

// multiLock: a MultiLock has no TryLockContext, so try is a LockContext
// given 100 ms. Its lock context must outlive the try, so the bound is a
// timer that cancels only a wait still under way, not a deadline.
type multiLock struct{ ml *dsync.MultiLock }

func (l multiLock) lock(ctx context.Context) (context.Context, error) { return l.ml.LockContext(ctx) }
func (l multiLock) try(ctx context.Context) (context.Context, bool, error) {
	tctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(100*time.Millisecond, cancel)
	lctx, err := l.ml.LockContext(tctx)
	timer.Stop()
	if err != nil {
		cancel()
		if ctx.Err() == nil && errors.Is(err, context.Canceled) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return lctx, true, nil
}
func (l multiLock) unlock(ctx context.Context) error { return l.ml.UnlockContext(ctx) }
