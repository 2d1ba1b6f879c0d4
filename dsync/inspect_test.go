package dsync_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
)

func inspectOne(t *testing.T, c *dsync.Client, name string, kind dsync.Kind) (dsync.LockState, bool) {
	t.Helper()
	states, err := c.Inspect(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Kind == kind {
			if s.Name != name {
				t.Fatalf("state of %q names %q", name, s.Name)
			}
			return s, true
		}
	}
	return dsync.LockState{}, false
}

func TestInspectMutex(t *testing.T) {
	c := newClient(t, dsync.WithLease(3*time.Second))
	name := "inspect {odd} %name"
	if states, err := c.Inspect(ctxT(t), name); err != nil || len(states) != 0 {
		t.Fatalf("Inspect of an unused name = %v, %v; want none", states, err)
	}
	m := c.NewMutex(name)
	ctx := dsync.WithOwner(ctxT(t))
	l1, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Re-entry through another Client is counted in Redis (within one
	// Client it is counted locally).
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), dsync.WithLease(3*time.Second))
	m2 := c2.NewMutex(name)
	if _, err := m2.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	owner, _ := dsync.OwnerOf(ctx)
	tok, _ := dsync.FencingToken(l1)
	st, ok := inspectOne(t, c, name, dsync.KindMutex)
	if !ok || len(st.Holders) != 1 {
		t.Fatalf("held mutex: state %+v, found %v", st, ok)
	}
	h := st.Holders[0]
	// Redis records the last of the tokens reserved with the acquisition.
	reserved := tok + dsync.DefaultMaxLocalHandoffs - 1
	if h.Owner != owner || h.Count != 2 || h.Token != reserved || st.LastToken != reserved {
		t.Errorf("holder = %+v (last token %d), want owner %s, count 2, token %d", h, st.LastToken, owner, reserved)
	}
	if h.Lease <= 0 || h.Lease > 3*time.Second {
		t.Errorf("remaining lease %v, want in (0, 3s]", h.Lease)
	}
	if len(st.Waiters) != 0 {
		t.Errorf("a Mutex reports waiters: %v", st.Waiters)
	}
	if err := m2.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.UnlockContext(ctx); err != nil {
		t.Fatal(err)
	}
	// A release records the last token issued (no local handoff: tok),
	// not the reserved block's end, which may be ahead of the clock.
	st, ok = inspectOne(t, c, name, dsync.KindMutex)
	if !ok || len(st.Holders) != 0 || st.LastToken != tok {
		t.Errorf("released mutex: state %+v, found %v; want free with last token %d", st, ok, tok)
	}
	if _, err := c.Inspect(ctxT(t), ""); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Errorf("Inspect(\"\") = %v, want ErrInvalidArgument", err)
	}
}

// TestInspectFairQueue checks that the queue of a FairMutex is reported in
// arrival order, across Clients.
func TestInspectFairQueue(t *testing.T) {
	c := newClient(t)
	name := "fair-inspect"
	f := c.NewFairMutex(name)
	hctx := dsync.WithOwner(ctxT(t))
	if _, err := f.LockContext(hctx); err != nil {
		t.Fatal(err)
	}
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
	if len(st.Holders) != 1 || st.Holders[0].Owner != holder {
		t.Fatalf("holders = %+v, want %s", st.Holders, holder)
	}
	var got []string
	for _, w := range st.Waiters {
		got = append(got, w.Owner)
		if w.Place <= 0 {
			t.Errorf("waiter %s has place %v", w.Owner, w.Place)
		}
	}
	if !slices.Equal(got, owners) {
		t.Errorf("queue = %v, want arrival order %v", got, owners)
	}
	cancel()
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}
	// Cancelled waiters leave the queue at once.
	if st, _ := inspectOne(t, c, name, dsync.KindFairMutex); len(st.Waiters) != 0 {
		t.Errorf("queue after cancel = %v", st.Waiters)
	}
	if err := f.UnlockContext(hctx); err != nil {
		t.Fatal(err)
	}
}

// TestInspectForceUnlock checks the operator's forced release: the holder
// loses its lock, a waiter gets it with a larger token.
func TestInspectForceUnlock(t *testing.T) {
	c := newClient(t, dsync.WithLease(300*time.Millisecond))
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	m := c.NewMutex("stuck")
	lctx, err := m.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := dsync.FencingToken(lctx)
	got := make(chan context.Context, 1)
	go func() {
		l, err := other.NewMutex("stuck").LockContext(ctxT(t))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	refs, err := other.ForceUnlock(ctxT(t), "stuck")
	if err != nil || len(refs) != 1 || refs[0].Kind != dsync.KindMutex {
		t.Fatalf("ForceUnlock = %v, %v", refs, err)
	}
	var l2 context.Context
	select {
	case l2 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock after a forced release")
	}
	if tok2, _ := dsync.FencingToken(l2); tok2 <= tok {
		t.Errorf("token after forced release %d <= %d", tok2, tok)
	}
	select {
	case <-lctx.Done():
		if !errors.Is(context.Cause(lctx), dsync.ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(lctx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the forced-out holder's lock context was not cancelled")
	}
	// Nothing held: nothing to release.
	if refs, err := c.ForceUnlock(ctxT(t), "never-used"); err != nil || len(refs) != 0 {
		t.Errorf("ForceUnlock of a free lock = %v, %v", refs, err)
	}
}

func TestInspectList(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	names := []string{"job:1", "job:2", "other}{x", "100%"}
	for _, n := range names {
		if _, ok, err := c.NewMutex(n).TryLockContext(ctx); err != nil || !ok {
			t.Fatal(n, ok, err)
		}
	}
	if _, ok, err := c.NewFairMutex("job:1").TryLockContext(ctx); err != nil || !ok {
		t.Fatal(ok, err)
	}
	all, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []dsync.LockRef{{dsync.KindMutex, "100%"}, {dsync.KindFairMutex, "job:1"}, {dsync.KindMutex, "job:1"},
		{dsync.KindMutex, "job:2"}, {dsync.KindMutex, "other}{x"}}
	if !slices.Equal(all, want) {
		t.Errorf("List(\"\") = %v, want %v", all, want)
	}
	jobs, err := c.List(ctx, "job:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Errorf("List(job:*) = %v", jobs)
	}
	odd, err := c.List(ctx, "other}*")
	if err != nil || len(odd) != 1 || odd[0].Name != "other}{x" {
		t.Errorf("List(other}*) = %v, %v", odd, err)
	}
}

// A key prefix with glob characters is matched as itself: List used to put
// it into SCAN MATCH unescaped and found nothing.
func TestListGlobPrefix(t *testing.T) {
	for _, prefix := range []string{"app[1]", "a*b?", `back\slash`} {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(testPrefix(t)+prefix))
		ctx := ctxT(t)
		if _, ok, err := c.NewMutex("held").TryLockContext(ctx); err != nil || !ok {
			t.Fatal(prefix, ok, err)
		}
		refs, err := c.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := []dsync.LockRef{{dsync.KindMutex, "held"}}; !slices.Equal(refs, want) {
			t.Errorf("prefix %q: List = %v, want %v", prefix, refs, want)
		}
	}
}

func inspectKind(t *testing.T, c *dsync.Client, name string, kind dsync.Kind) dsync.LockState {
	t.Helper()
	st, ok := inspectOne(t, c, name, kind)
	if !ok {
		t.Fatalf("Inspect(%q) found no %s", name, kind)
	}
	return st
}

func TestInspectRWMutex(t *testing.T) {
	c := newClient(t)
	other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	rw := c.NewRWMutex("cfg")
	r1, err := rw.RLockContext(dsync.WithOwner(ctx))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLockContext(dsync.WithOwner(ctx))
	if err != nil {
		t.Fatal(err)
	}
	st := inspectKind(t, c, "cfg", dsync.KindRWMutex)
	if st.Mode != "read" || len(st.Holders) != 2 {
		t.Fatalf("two readers: %+v", st)
	}
	for _, h := range st.Holders {
		if h.Count != 1 || h.Token == 0 || h.Lease <= 0 {
			t.Errorf("reader %+v", h)
		}
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
		if err := rw.RUnlockContext(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st = inspectKind(t, c, "cfg", dsync.KindRWMutex)
	if st.Mode != "write" || len(st.Holders) != 1 || st.Holders[0].Owner != wOwner || len(st.Waiters) != 0 {
		t.Errorf("writer: %+v", st)
	}
}

func TestInspectSemaphore(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	sem := c.NewSemaphore("pool", 5)
	a, err := sem.Acquire(dsync.WithOwner(ctx), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Acquire(dsync.WithOwner(ctx), 2); err != nil {
		t.Fatal(err)
	}
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
	if st.Size != 5 || st.Free != 1 || len(st.Holders) != 2 || st.Waiters[0].Permits != 3 || st.LastToken == 0 {
		t.Errorf("semaphore: %+v", st)
	}
	for _, h := range st.Holders {
		if h.Permits != 2 || h.Lease <= 0 {
			t.Errorf("holder %+v", h)
		}
	}
	if err := sem.Release(a, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := inspectKind(t, c, "pool", dsync.KindSemaphore); st.Free != 0 || len(st.Waiters) != 0 {
		t.Errorf("after the grant: %+v", st)
	}
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
	if st.Done || len(st.Holders) != 1 || st.Holders[0].Owner != runner || st.Holders[0].Token == 0 {
		t.Errorf("running Once: %+v", st)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := inspectKind(t, c, "init", dsync.KindOnce); !st.Done || len(st.Holders) != 0 {
		t.Errorf("done Once: %+v", st)
	}

	if err := c.NewWaitGroup("batch").Add(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if st := inspectKind(t, c, "batch", dsync.KindWaitGroup); st.Counter != 3 {
		t.Errorf("WaitGroup counter = %d, want 3", st.Counter)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	sl, err := c.NewSemaphore(name, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan context.Context, 1)
	go c.NewOnce(name).Do(ctx, func(fctx context.Context) error {
		running <- fctx
		<-fctx.Done() // stuck until its run is taken away
		return fctx.Err()
	})
	ol := <-running
	if err := c.NewWaitGroup(name).Add(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- other.NewWaitGroup(name).Wait(ctx) }()

	refs, err := c.ForceUnlock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[dsync.Kind]bool{}
	for _, r := range refs {
		kinds[r.Kind] = true
	}
	for _, k := range []dsync.Kind{dsync.KindRWMutex, dsync.KindSemaphore, dsync.KindOnce, dsync.KindWaitGroup} {
		if !kinds[k] {
			t.Errorf("ForceUnlock did not release the %s: %v", k, refs)
		}
	}
	for what, l := range map[string]context.Context{"rw write": wl, "semaphore": sl, "once run": ol} {
		select {
		case <-l.Done():
			if !errors.Is(context.Cause(l), dsync.ErrLockLost) {
				t.Errorf("%s ended with %v, want ErrLockLost", what, context.Cause(l))
			}
		case <-time.After(2 * time.Second):
			t.Errorf("%s holder not told within 2s", what)
		}
	}
	if _, ok, err := other.NewRWMutex(name).TryLockContext(ctx); err != nil || !ok {
		t.Errorf("rw mutex after ForceUnlock: %v %v", ok, err)
	}
	if _, ok, err := other.NewSemaphore(name, 2).TryAcquire(ctx, 2); err != nil || !ok {
		t.Errorf("semaphore after ForceUnlock: %v %v", ok, err)
	}
	ran := false
	if err := other.NewOnce(name).Do(ctx, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("once after ForceUnlock: ran %v, %v", ran, err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("Wait after the reset = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Wait not released by the WaitGroup reset")
	}
	if refs, err := c.ForceUnlock(ctx, "never-held"); err != nil || len(refs) != 0 {
		t.Errorf("ForceUnlock of nothing = %v, %v", refs, err)
	}
}
