package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relLock is one lock's context acquire and release, for the misuse tables.
type relLock struct {
	name    string
	lock    func(ctx context.Context) (context.Context, error)
	unlock  func(ctx context.Context) error
	acquire string // the acquire call the error must name
}

// relLocks returns every primitive with a release by context, named name,
// on c (c2: a second Client of the same prefix, for the release through
// another Client).
func relLocks(c *dsync.Client, name string) []relLock {
	m := c.NewMutex(name)
	f := c.NewFairMutex(name)
	rw := c.NewRWMutex(name)
	rwr := c.NewRWMutex(name + "-r")
	s := c.NewSemaphore(name, 3)
	ml := c.NewMultiLock([]string{name + "-a", name + "-b"})
	rl := dsync.NewRedLock(name, []*dsync.Client{c})
	return []relLock{
		{"Mutex", m.LockContext, m.UnlockContext, "LockContext"},
		{"FairMutex", f.LockContext, f.UnlockContext, "LockContext"},
		{"RWMutex", rw.LockContext, rw.UnlockContext, "LockContext"},
		{"RWMutex read", rwr.RLockContext, rwr.RUnlockContext, "RLockContext"},
		{"Semaphore", func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 2) },
			func(ctx context.Context) error { return s.Release(ctx, 2) }, "Acquire"},
		{"MultiLock", ml.LockContext, ml.UnlockContext, "LockContext"},
		{"RedLock", rl.LockContext, rl.UnlockContext, "LockContext"},
	}
}

// TestUnlockWithWrongContext: the parent context passed to UnlockContext
// instead of the lock context LockContext returned, or another lock's lock
// context, returns ErrWrongContext (which is ErrNotHeld too), naming the
// lock and the lock context to pass; the lock stays held, and the lock
// context releases it. Through the holder's Client and another.
func TestUnlockWithWrongContext(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	other, err := c.NewMutex("other").LockContext(ctx)
	require.NoError(t, err)
	for i := range relLocks(c, "wrong-ctx") {
		mine := relLocks(c, fmt.Sprintf("wrong-ctx-%d", i))[i]
		theirs := relLocks(c2, fmt.Sprintf("wrong-ctx-%d", i))[i]
		t.Run(mine.name, func(t *testing.T) {
			lctx, err := mine.lock(ctx)
			require.NoError(t, err)
			for _, w := range []struct {
				what string
				ctx  context.Context
				rel  func(context.Context) error
			}{
				{"parent context", ctx, mine.unlock},
				{"parent context, other Client", ctx, theirs.unlock},
				{"another lock's lock context", other, mine.unlock},
			} {
				err := w.rel(w.ctx)
				require.Error(t, err, w.what)
				assert.ErrorIs(t, err, dsync.ErrWrongContext, w.what)
				assert.ErrorIs(t, err, dsync.ErrNotHeld, w.what)
				msg := err.Error()
				assert.Contains(t, msg, fmt.Sprintf("wrong-ctx-%d", i), "%s: the error names the lock", w.what)
				assert.Contains(t, msg, "pass the lock context that "+mine.acquire+" returned", w.what)
				require.NoError(t, lctx.Err(), "%s: the lock is still held", w.what)
			}
			require.NoError(t, mine.unlock(lctx))
			// A second release with the right lock context is not the
			// wrong context: it was released already.
			err = mine.unlock(lctx)
			assert.ErrorIs(t, err, dsync.ErrNotHeld)
			assert.NotErrorIs(t, err, dsync.ErrWrongContext)
			assert.Contains(t, err.Error(), fmt.Sprintf("wrong-ctx-%d", i))
		})
	}
	// Lock, then UnlockContext: the same mistake.
	m := c.NewMutex("wrong-ctx-locker")
	m.Lock()
	err = m.UnlockContext(ctx)
	assert.ErrorIs(t, err, dsync.ErrWrongContext)
	assert.Contains(t, err.Error(), `"wrong-ctx-locker"`)
	assert.Contains(t, err.Error(), "released by Unlock")
	m.Unlock()
}

// TestUnlockAfterLockContextPanicsWithTheMistake: Unlock of a lock held
// through LockContext (RUnlock after RLockContext) panics with a message
// that names the lock and says to use UnlockContext with the lock context;
// Unlock of a lock nobody holds still says it is unlocked, naming it.
func TestUnlockAfterLockContextPanicsWithTheMistake(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	m := c.NewMutex("pm")
	f := c.NewFairMutex("pf")
	rw := c.NewRWMutex("prw")
	ml := c.NewMultiLock([]string{"pml-a", "pml-b"})
	rl := dsync.NewRedLock("prl", []*dsync.Client{c})
	for _, tc := range []struct {
		what, name, op, hint string
		lock                 func(context.Context) (context.Context, error)
		unlockCtx            func(context.Context) error
		unlock               func()
	}{
		{"Mutex", "pm", "unlock", "UnlockContext(lctx)", m.LockContext, m.UnlockContext, m.Unlock},
		{"FairMutex", "pf", "unlock", "UnlockContext(lctx)", f.LockContext, f.UnlockContext, f.Unlock},
		{"RWMutex", "prw", "unlock", "UnlockContext(lctx)", rw.LockContext, rw.UnlockContext, rw.Unlock},
		{"RWMutex", "prw", "RUnlock", "RUnlockContext(lctx)", rw.RLockContext, rw.RUnlockContext, rw.RUnlock},
		{"MultiLock", "pml-a,pml-b", "unlock", "UnlockContext(lctx)", ml.LockContext, ml.UnlockContext, ml.Unlock},
		{"RedLock", "prl", "unlock", "UnlockContext(lctx)", rl.LockContext, rl.UnlockContext, rl.Unlock},
	} {
		t.Run(tc.what+" "+tc.op, func(t *testing.T) {
			lctx, err := tc.lock(ctx)
			require.NoError(t, err)
			msg := panicMsg(t, tc.unlock)
			assert.Contains(t, msg, fmt.Sprintf("%s %q", tc.what, tc.name))
			assert.Contains(t, msg, "which Lock did not lock")
			assert.Contains(t, msg, "release it with "+tc.hint)
			require.NoError(t, lctx.Err(), "the lock is still held")
			require.NoError(t, tc.unlockCtx(lctx))
			assert.Equal(t, fmt.Sprintf("dsync: %s of unlocked %s %q", tc.op, tc.what, tc.name), panicMsg(t, tc.unlock))
		})
	}
}

func panicMsg(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		require.NotNil(t, r, "no panic")
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

// TestWaitErrorsNameTheLock: a wait ended by its context, deadline or
// cancellation (during the wait, or before the call), names the lock and still matches the context's error, for
// every primitive that waits; the holder is on another Client.
func TestWaitErrorsNameTheLock(t *testing.T) {
	holder := newClient(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, holder)))
	ctx := ctxT(t)
	type waitFn func(ctx context.Context) error
	lockWait := func(f func(context.Context) (context.Context, error)) waitFn {
		return func(ctx context.Context) error { _, err := f(ctx); return err }
	}
	hold := func(t *testing.T, f func(context.Context) (context.Context, error)) {
		_, err := f(ctx)
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		what, name string
		block      func(t *testing.T) // makes the wait block, through holder
		wait       waitFn             // through c
	}{
		{"Mutex", "w-mutex", func(t *testing.T) { hold(t, holder.NewMutex("w-mutex").LockContext) }, lockWait(c.NewMutex("w-mutex").LockContext)},
		{"FairMutex", "w-fair", func(t *testing.T) { hold(t, holder.NewFairMutex("w-fair").LockContext) }, lockWait(c.NewFairMutex("w-fair").LockContext)},
		{"RWMutex", "w-rw", func(t *testing.T) { hold(t, holder.NewRWMutex("w-rw").RLockContext) }, lockWait(c.NewRWMutex("w-rw").LockContext)},
		{"RWMutex read", "w-rwr", func(t *testing.T) { hold(t, holder.NewRWMutex("w-rwr").LockContext) }, lockWait(c.NewRWMutex("w-rwr").RLockContext)},
		{"Semaphore", "w-sem", func(t *testing.T) {
			hold(t, func(ctx context.Context) (context.Context, error) {
				return holder.NewSemaphore("w-sem", 2).Acquire(ctx, 2)
			})
		}, func(ctx context.Context) error { _, err := c.NewSemaphore("w-sem", 2).Acquire(ctx, 1); return err }},
		{"MultiLock", "w-ml-", func(t *testing.T) { hold(t, holder.NewMutex("w-ml-b").LockContext) }, lockWait(c.NewMultiLock([]string{"w-ml-a", "w-ml-b"}).LockContext)},
		{"RedLock", "w-red", func(t *testing.T) { hold(t, dsync.NewRedLock("w-red", []*dsync.Client{holder}).LockContext) },
			lockWait(dsync.NewRedLock("w-red", []*dsync.Client{c}).LockContext)},
		{"Once", "w-once", func(t *testing.T) {
			started := make(chan struct{})
			go func() {
				_ = holder.NewOnce("w-once").Do(ctx, func(ctx context.Context) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			<-started
		}, func(ctx context.Context) error {
			return c.NewOnce("w-once").Do(ctx, func(context.Context) error { return errors.New("ran") })
		}},
		{"WaitGroup", "w-wg", func(t *testing.T) { require.NoError(t, holder.NewWaitGroup("w-wg").Add(ctx, 1)) }, c.NewWaitGroup("w-wg").Wait},
		{"Election", "w-elect", func(t *testing.T) {
			_, err := holder.NewElection("w-elect").Campaign(ctx, "a")
			require.NoError(t, err)
		}, func(ctx context.Context) error { _, err := c.NewElection("w-elect").Campaign(ctx, "b"); return err }},
		{"Group", "w-group", func(t *testing.T) {
			started := make(chan struct{})
			go func() {
				_, _, _ = dsync.NewGroup[int](holder, "w-group").Do(ctx, "k", func(ctx context.Context) (int, error) {
					close(started)
					<-ctx.Done()
					return 0, ctx.Err()
				})
			}()
			<-started
		}, func(ctx context.Context) error {
			_, _, err := dsync.NewGroup[int](c, "w-group").Do(ctx, "k", func(context.Context) (int, error) { return 1, nil })
			return err
		}},
		{"Cond", "w-cond", func(t *testing.T) {}, func(ctx context.Context) error {
			// The wait's bound is the lock context's parent: ctx.
			m := c.NewMutex("w-cond")
			lctx, err := m.LockContext(ctx)
			if err != nil {
				return err
			}
			nctx, err := c.NewCond(m).Wait(lctx)
			if err == nil {
				_ = m.UnlockContext(nctx)
			}
			return err
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			tc.block(t)
			for _, end := range []struct {
				want error
				ctx  func() (context.Context, context.CancelFunc)
			}{
				{context.DeadlineExceeded, func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 100*time.Millisecond) }},
				{context.Canceled, func() (context.Context, context.CancelFunc) {
					wctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(100*time.Millisecond, cancel) // the injected end
					return wctx, cancel
				}},
				{context.Canceled, func() (context.Context, context.CancelFunc) {
					wctx, cancel := context.WithCancel(ctx)
					cancel() // ended before the call
					return wctx, cancel
				}},
			} {
				wctx, cancel := end.ctx()
				err := tc.wait(wctx)
				cancel()
				require.Error(t, err, "%v", end.want)
				assert.ErrorIs(t, err, end.want)
				named := fmt.Sprintf("%q", tc.name)
				if tc.what == "MultiLock" {
					named = `"w-ml-` // the member it was waiting for
				}
				assert.Contains(t, err.Error(), named, "the wait error names the lock: %v", err)
			}
		})
	}
}
