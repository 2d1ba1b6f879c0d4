package dsync_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
)

// TestMultiLockClusterAllOrNone: members on three different masters are
// held together, and a wait ended by ctx leaves every member free.
func TestMultiLockClusterAllOrNone(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	names := namesOnMasters(t, prefix)
	ml := c.NewMultiLock(names)
	ctx := ctxT(t)
	lctx, err := ml.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dsync.OwnerOf(lctx); !ok {
		t.Fatal("no owner in the lock context")
	}
	for _, n := range names {
		if _, ok, err := c.NewMutex(n).TryLockContext(ctx); ok || err != nil {
			t.Fatalf("member %q free while the MultiLock holds it: %v %v", n, ok, err)
		}
	}
	if err := ml.UnlockContext(lctx); err != nil {
		t.Fatal(err)
	}
	if lctx.Err() == nil || errors.Is(context.Cause(lctx), dsync.ErrLockLost) {
		t.Fatalf("lock context after release: %v, cause %v", lctx.Err(), context.Cause(lctx))
	}
	if err := ml.UnlockContext(lctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("second unlock = %v, want ErrNotHeld", err)
	}

	// Another owner holds the member taken last: the wait ends with ctx,
	// and the members taken before it are released again.
	ordered := append([]string(nil), names...)
	last := ordered[0]
	for _, n := range ordered {
		if prefix+":{"+n+"}:mutex" > prefix+":{"+last+"}:mutex" {
			last = n
		}
	}
	block, err := c.NewMutex(last).LockContext(dsync.WithOwner(ctx))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := ml.LockContext(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked MultiLock = %v, want DeadlineExceeded", err)
	}
	for _, n := range names {
		if n == last {
			continue
		}
		l, ok, err := c.NewMutex(n).TryLockContext(ctx)
		if !ok || err != nil {
			t.Fatalf("member %q left held after a failed MultiLock: %v %v", n, ok, err)
		}
		c.NewMutex(n).UnlockContext(l)
	}
	c.NewMutex(last).UnlockContext(block)

	if _, err := dsync.NewMultiLock().LockContext(ctx); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("empty MultiLock = %v, want ErrInvalidArgument", err)
	}
}

// TestMultiLockOppositeOrder: two Clients lock overlapping sets given in
// opposite orders; with a global order nobody deadlocks and nobody shares.
func TestMultiLockOppositeOrder(t *testing.T) {
	prefix := testPrefix(t)
	sets := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "c"}}
	var inside [3]atomic.Int32 // holders of a, b, c
	idx := map[string]int{"a": 0, "b": 1, "c": 2}
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, set := range sets {
		c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ml := c.NewMultiLock(set)
				for it := 0; it < 15; it++ {
					lctx, err := ml.LockContext(ctx)
					if err != nil {
						t.Errorf("set %d: %v (deadlock?)", i, err)
						return
					}
					for _, n := range set {
						if v := inside[idx[n]].Add(1); v != 1 {
							t.Errorf("%d holders of %q", v, n)
						}
					}
					time.Sleep(100 * time.Microsecond)
					for _, n := range set {
						inside[idx[n]].Add(-1)
					}
					if err := ml.UnlockContext(lctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
}

// TestMultiLockMemberLost: a member whose fixed lease runs out cancels the
// MultiLock's context with ErrLockLost.
func TestMultiLockMemberLost(t *testing.T) {
	c := newClient(t)
	ml := dsync.NewMultiLock(c.NewMutex("long"), c.NewMutex("short", dsync.WithLeaseTime(150*time.Millisecond)))
	lctx, err := ml.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the lost member to cancel the MultiLock", func() bool { return lctx.Err() != nil })
	if !errors.Is(context.Cause(lctx), dsync.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(lctx))
	}
	// Releasing still releases the member that is held. The lost one
	// reports ErrNotHeld, or nil if its key had not quite expired in Redis
	// yet (the local lease clock runs out first, by design).
	if err := ml.UnlockContext(lctx); err != nil && !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("unlock after a loss = %v", err)
	}
	if l, ok, err := c.NewMutex("long").TryLockContext(ctxT(t)); !ok || err != nil {
		t.Fatalf("the held member was not released: %v %v", ok, err)
	} else {
		c.NewMutex("long").UnlockContext(l)
	}
}

func TestMultiLockLocker(t *testing.T) {
	c := newClient(t)
	var l sync.Locker = c.NewMultiLock([]string{"x", "y"})
	l.Lock()
	got := make(chan struct{})
	go func() {
		l.Lock()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("second Lock did not block")
	case <-time.After(50 * time.Millisecond):
	}
	l.Unlock()
	<-got
	l.Unlock()
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an unlocked MultiLock did not panic")
		}
	}()
	l.Unlock()
}
