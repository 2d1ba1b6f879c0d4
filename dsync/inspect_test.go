package dsync_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func inspectOne(t *testing.T, c *dsync.Client, name string, kind dsync.Kind) (dsync.LockState, bool) {
	t.Helper()
	states, err := c.Inspect(ctxT(t), name)
	require.NoError(t, err)
	for _, s := range states {
		if s.Kind == kind {
			require.Equal(t, name, s.Name, "state")
			return s, true
		}
	}
	return dsync.LockState{}, false
}

// waitingCount is how many acquisitions Inspect reports waiting for the
// lock name of kind, in every Client (each Waiter's Count summed).
func waitingCount(t *testing.T, c *dsync.Client, name string, kind dsync.Kind) int64 {
	t.Helper()
	st, _ := inspectOne(t, c, name, kind)
	var n int64
	for _, w := range st.Waiters {
		n += w.Count
	}
	return n
}

func TestInspectMutex(t *testing.T) {
	c := newClient(t, dsync.WithLease(3*time.Second))
	name := "inspect {odd} %name"
	states, err := c.Inspect(ctxT(t), name)
	require.NoError(t, err, "Inspect of an unused name")
	require.Empty(t, states, "Inspect of an unused name")
	m := c.NewMutex(name)
	ctx := dsync.WithOwner(ctxT(t))
	l1, err := m.LockContext(ctx)
	require.NoError(t, err)
	// Re-entry through another Client is counted in Redis (within one
	// Client it is counted locally).
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), dsync.WithLease(3*time.Second))
	m2 := c2.NewMutex(name)
	_, err = m2.LockContext(ctx)
	require.NoError(t, err)
	owner, _ := dsync.OwnerOf(ctx)
	tok, _ := dsync.FencingToken(l1)
	st, ok := inspectOne(t, c, name, dsync.KindMutex)
	require.True(t, ok, "held mutex: state %+v", st)
	require.Len(t, st.Holders, 1, "held mutex: state %+v", st)
	h := st.Holders[0]
	// Redis records the last of the tokens reserved with the acquisition:
	// none beyond its own, since no goroutine of its Client waited.
	reserved := tok
	assert.Equal(t, owner, h.Owner, "holder = %+v, last token %d", h, st.LastToken)
	assert.Equal(t, int64(2), h.Count, "holder = %+v, last token %d", h, st.LastToken)
	assert.Equal(t, reserved, h.Token, "holder = %+v, last token %d", h, st.LastToken)
	assert.Equal(t, reserved, st.LastToken, "holder = %+v, last token %d", h, st.LastToken)
	assert.Greater(t, h.Lease, time.Duration(0), "remaining lease")
	assert.LessOrEqual(t, h.Lease, 3*time.Second, "remaining lease")
	assert.Empty(t, st.Waiters, "a Mutex reports waiters: %v", st.Waiters)
	require.NoError(t, m2.UnlockContext(ctx))
	require.NoError(t, m.UnlockContext(ctx))
	// A release records the last token issued (no local handoff: tok),
	// not the reserved block's end, which may be ahead of the clock.
	st, ok = inspectOne(t, c, name, dsync.KindMutex)
	assert.True(t, ok, "released mutex: state %+v", st)
	assert.Empty(t, st.Holders, "released mutex: state %+v", st)
	assert.Equal(t, tok, st.LastToken, "released mutex: state %+v", st)
	_, err = c.Inspect(ctxT(t), "")
	assert.ErrorIs(t, err, dsync.ErrInvalidArgument, "Inspect(\"\")")
}

// TestInspectFairQueue checks that the queue of a FairMutex is reported in
// arrival order, across Clients.
func TestInspectFairQueue(t *testing.T) {
	c := newClient(t)
	name := "fair-inspect"
	f := c.NewFairMutex(name)
	hctx := dsync.WithOwner(ctxT(t))
	_, err := f.LockContext(hctx)
	require.NoError(t, err)
	var owners []string
	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	errs := make(chan error, 3)
	for i := range 3 {
		ci := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
		ctx := dsync.WithOwner(wctx)
		o, _ := dsync.OwnerOf(ctx)
		owners = append(owners, o)
		go func() {
			_, err := ci.NewFairMutex(name).LockContext(ctx)
			errs <- err
		}()
		waitFor(t, 5*time.Second, "waiter to queue", func() bool {
			st, _ := inspectOne(t, c, name, dsync.KindFairMutex)
			return len(st.Waiters) == i+1
		})
	}
	st, _ := inspectOne(t, c, name, dsync.KindFairMutex)
	holder, _ := dsync.OwnerOf(hctx)
	require.Len(t, st.Holders, 1, "holders = %+v", st.Holders)
	require.Equal(t, holder, st.Holders[0].Owner, "holders = %+v", st.Holders)
	var got []string
	for _, w := range st.Waiters {
		got = append(got, w.Owner)
		assert.Greater(t, w.Place, time.Duration(0), "waiter %s has place", w.Owner)
	}
	assert.True(t, slices.Equal(got, owners), "queue = %v, want arrival order %v", got, owners)
	cancel()
	for range 3 {
		assert.ErrorIs(t, <-errs, context.Canceled, "cancelled waiter")
	}
	// Cancelled waiters leave the queue at once.
	st, _ = inspectOne(t, c, name, dsync.KindFairMutex)
	assert.Empty(t, st.Waiters, "queue after cancel")
	require.NoError(t, f.UnlockContext(hctx))
}

// TestInspectForceUnlock checks the operator's forced release: the holder
// loses its lock, a waiter gets it with a larger token.
func TestInspectForceUnlock(t *testing.T) {
	c := newClient(t, dsync.WithLease(300*time.Millisecond))
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	m := c.NewMutex("stuck")
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	got := make(chan context.Context, 1)
	go func() {
		l, err := other.NewMutex("stuck").LockContext(ctxT(t))
		assert.NoError(t, err)
		got <- l
	}()
	refs, err := other.ForceUnlock(ctxT(t), "stuck")
	require.NoError(t, err, "ForceUnlock = %v", refs)
	require.Len(t, refs, 1, "ForceUnlock = %v", refs)
	require.Equal(t, dsync.KindMutex, refs[0].Kind, "ForceUnlock = %v", refs)
	var l2 context.Context
	select {
	case l2 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock after a forced release")
	}
	tok2, _ := dsync.FencingToken(l2)
	assert.Greater(t, tok2, tok, "token after forced release")
	select {
	case <-lctx.Done():
		assert.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "cause")
	case <-time.After(5 * time.Second):
		t.Fatal("the forced-out holder's lock context was not cancelled")
	}
	// Nothing held: nothing to release.
	refs, err = c.ForceUnlock(ctxT(t), "never-used")
	assert.NoError(t, err, "ForceUnlock of a free lock")
	assert.Empty(t, refs, "ForceUnlock of a free lock")
}

func TestInspectList(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	names := []string{"job:1", "job:2", "other}{x", "100%"}
	for _, n := range names {
		_, ok, err := c.NewMutex(n).TryLockContext(ctx)
		require.NoError(t, err, n)
		require.True(t, ok, n)
	}
	_, ok, err := c.NewFairMutex("job:1").TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	all, err := c.List(ctx, "")
	require.NoError(t, err)
	want := []dsync.LockRef{{dsync.KindMutex, "100%"}, {dsync.KindFairMutex, "job:1"}, {dsync.KindMutex, "job:1"},
		{dsync.KindMutex, "job:2"}, {dsync.KindMutex, "other}{x"}}
	assert.True(t, slices.Equal(all, want), "List(\"\") = %v, want %v", all, want)
	jobs, err := c.List(ctx, "job:*")
	require.NoError(t, err)
	assert.Len(t, jobs, 3, "List(job:*) = %v", jobs)
	odd, err := c.List(ctx, "other}*")
	if assert.NoError(t, err, "List(other}*)") && assert.Len(t, odd, 1, "List(other}*)") {
		assert.Equal(t, "other}{x", odd[0].Name, "List(other}*)")
	}
}

// A key prefix with glob characters is matched as itself: List used to put
// it into SCAN MATCH unescaped and found nothing.
func TestListGlobPrefix(t *testing.T) {
	for _, prefix := range []string{"app[1]", "a*b?", `back\slash`} {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(testPrefix(t)+prefix))
		ctx := ctxT(t)
		_, ok, err := c.NewMutex("held").TryLockContext(ctx)
		require.NoError(t, err, prefix)
		require.True(t, ok, prefix)
		refs, err := c.List(ctx, "")
		require.NoError(t, err)
		want := []dsync.LockRef{{dsync.KindMutex, "held"}}
		assert.True(t, slices.Equal(refs, want), "prefix %q: List = %v, want %v", prefix, refs, want)
	}
}

func inspectKind(t *testing.T, c *dsync.Client, name string, kind dsync.Kind) dsync.LockState {
	t.Helper()
	st, ok := inspectOne(t, c, name, kind)
	require.True(t, ok, "Inspect(%q) found no %s", name, kind)
	return st
}

func TestInspectRWMutex(t *testing.T) {
	c := newClient(t)
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	rw := c.NewRWMutex("cfg")
	r1, err := rw.RLockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	r2, err := rw.RLockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	st := inspectKind(t, c, "cfg", dsync.KindRWMutex)
	require.Equal(t, "read", st.Mode, "two readers: %+v", st)
	require.Len(t, st.Holders, 2, "two readers: %+v", st)
	for _, h := range st.Holders {
		assert.Equal(t, int64(1), h.Count, "reader %+v", h)
		assert.NotEqual(t, uint64(0), h.Token, "reader %+v", h)
		assert.Greater(t, h.Lease, time.Duration(0), "reader %+v", h)
	}
	// A writer queues behind the readers.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wctx = dsync.WithOwner(wctx)
	wOwner, _ := dsync.OwnerOf(wctx)
	done := make(chan error, 1)
	go func() {
		_, err := other.NewRWMutex("cfg").LockContext(wctx)
		done <- err
	}()
	waitFor(t, 5*time.Second, "the writer to queue", func() bool {
		st, _ := inspectOne(t, c, "cfg", dsync.KindRWMutex)
		return len(st.Waiters) == 1 && st.Waiters[0].Owner == wOwner
	})
	for _, r := range []context.Context{r1, r2} {
		require.NoError(t, rw.RUnlockContext(r))
	}
	require.NoError(t, <-done)
	st = inspectKind(t, c, "cfg", dsync.KindRWMutex)
	assert.Equal(t, "write", st.Mode, "writer: %+v", st)
	if assert.Len(t, st.Holders, 1, "writer: %+v", st) {
		assert.Equal(t, wOwner, st.Holders[0].Owner, "writer: %+v", st)
	}
	assert.Empty(t, st.Waiters, "writer: %+v", st)
}

func TestInspectSemaphore(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	sem := c.NewSemaphore("pool", 5)
	a, err := sem.Acquire(dsync.WithOwner(ctx), 2)
	require.NoError(t, err)
	_, err = sem.Acquire(dsync.WithOwner(ctx), 2)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := sem.Acquire(dsync.WithOwner(wctx), 3)
		done <- err
	}()
	waitFor(t, 5*time.Second, "the waiter to queue", func() bool {
		st, _ := inspectOne(t, c, "pool", dsync.KindSemaphore)
		return len(st.Waiters) == 1
	})
	st := inspectKind(t, c, "pool", dsync.KindSemaphore)
	assert.Equal(t, int64(5), st.Size, "semaphore: %+v", st)
	assert.Equal(t, int64(1), st.Free, "semaphore: %+v", st)
	assert.Len(t, st.Holders, 2, "semaphore: %+v", st)
	if assert.NotEmpty(t, st.Waiters, "semaphore: %+v", st) {
		assert.Equal(t, int64(3), st.Waiters[0].Permits, "semaphore: %+v", st)
	}
	assert.NotZero(t, st.LastToken, "semaphore: %+v", st)
	for _, h := range st.Holders {
		assert.Equal(t, int64(2), h.Permits, "holder %+v", h)
		assert.Greater(t, h.Lease, time.Duration(0), "holder %+v", h)
	}
	require.NoError(t, sem.Release(a, 2))
	require.NoError(t, <-done)
	st = inspectKind(t, c, "pool", dsync.KindSemaphore)
	assert.Equal(t, int64(0), st.Free, "after the grant: %+v", st)
	assert.Empty(t, st.Waiters, "after the grant: %+v", st)
}

func TestInspectOnceAndWaitGroup(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	running, finish := make(chan string, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.NewOnce("init").Do(ctx, func(ctx context.Context) error {
			o, _ := dsync.OwnerOf(ctx)
			running <- o
			<-finish
			return nil
		})
	}()
	runner := <-running
	st := inspectKind(t, c, "init", dsync.KindOnce)
	assert.False(t, st.Done, "running Once: %+v", st)
	if assert.Len(t, st.Holders, 1, "running Once: %+v", st) {
		assert.Equal(t, runner, st.Holders[0].Owner, "running Once: %+v", st)
		assert.NotZero(t, st.Holders[0].Token, "running Once: %+v", st)
	}
	close(finish)
	require.NoError(t, <-done)
	st = inspectKind(t, c, "init", dsync.KindOnce)
	assert.True(t, st.Done, "done Once: %+v", st)
	assert.Empty(t, st.Holders, "done Once: %+v", st)

	require.NoError(t, c.NewWaitGroup("batch").Add(ctx, 3))
	assert.Equal(t, int64(3), inspectKind(t, c, "batch", dsync.KindWaitGroup).Counter, "WaitGroup counter")
}

// ForceUnlock covers every primitive that can be held: each holder's lock
// context ends with ErrLockLost at its next renewal, waiters get in, a
// running Once's waiter runs f, and a WaitGroup's Waits return.
func TestForceUnlockEveryPrimitive(t *testing.T) {
	const lease = 300 * time.Millisecond
	c := newClient(t, dsync.WithLease(lease))
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), dsync.WithLease(lease))
	ctx := ctxT(t)
	name := "stuck"
	wl, err := c.NewRWMutex(name).LockContext(ctx)
	require.NoError(t, err)
	sl, err := c.NewSemaphore(name, 2).Acquire(ctx, 2)
	require.NoError(t, err)
	running := make(chan context.Context, 1)
	go c.NewOnce(name).Do(ctx, func(fctx context.Context) error {
		running <- fctx
		<-fctx.Done() // stuck until its run is taken away
		return fctx.Err()
	})
	ol := <-running
	require.NoError(t, c.NewWaitGroup(name).Add(ctx, 3))
	waited := make(chan error, 1)
	go func() { waited <- other.NewWaitGroup(name).Wait(ctx) }()

	refs, err := c.ForceUnlock(ctx, name)
	require.NoError(t, err)
	kinds := map[dsync.Kind]bool{}
	for _, r := range refs {
		kinds[r.Kind] = true
	}
	for _, k := range []dsync.Kind{dsync.KindRWMutex, dsync.KindSemaphore, dsync.KindOnce, dsync.KindWaitGroup} {
		assert.True(t, kinds[k], "ForceUnlock did not release the %s: %v", k, refs)
	}
	for what, l := range map[string]context.Context{"rw write": wl, "semaphore": sl, "once run": ol} {
		select {
		case <-l.Done():
			assert.ErrorIs(t, context.Cause(l), dsync.ErrLockLost, "%s", what)
		case <-time.After(2 * time.Second):
			t.Errorf("%s holder not told within 2s", what)
		}
	}
	_, ok, err := other.NewRWMutex(name).TryLockContext(ctx)
	assert.NoError(t, err, "rw mutex after ForceUnlock")
	assert.True(t, ok, "rw mutex after ForceUnlock")
	_, ok, err = other.NewSemaphore(name, 2).TryAcquire(ctx, 2)
	assert.NoError(t, err, "semaphore after ForceUnlock")
	assert.True(t, ok, "semaphore after ForceUnlock")
	ran := false
	assert.NoError(t, other.NewOnce(name).Do(ctx, func(context.Context) error { ran = true; return nil }), "once after ForceUnlock: ran")
	assert.True(t, ran, "once after ForceUnlock: ran")
	select {
	case err := <-waited:
		assert.NoError(t, err, "Wait after the reset")
	case <-time.After(2 * time.Second):
		t.Error("Wait not released by the WaitGroup reset")
	}
	refs, err = c.ForceUnlock(ctx, "never-held")
	assert.NoError(t, err, "ForceUnlock of nothing")
	assert.Empty(t, refs, "ForceUnlock of nothing")
}
