package dsync_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
)

// A Mutex's waiters queue inside their process, so Inspect counts them per
// waiting Client, from that Client's attempts, and forgets a Client once
// its waiters stop waiting.
func TestInspectMutexWaiters(t *testing.T) {
	holder := newClient(t, dsync.WithLease(3*time.Second), dsync.WithClientName("holder"))
	prefix := dsync.WithKeyPrefix(prefixOf(t, holder))
	b := newClientOn(t, newRueidis(t), prefix, dsync.WithLease(3*time.Second), dsync.WithClientName("procb"))
	cc := newClientOn(t, newRueidis(t), prefix, dsync.WithLease(3*time.Second), dsync.WithClientName("procc"))
	name := "waiters {counted}"
	lctx, err := holder.NewMutex(name).LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}

	// procb: 3 goroutines that give up when bctx ends; procc: 2 that wait
	// until they get the lock.
	bctx, bcancel := context.WithCancel(ctxT(t))
	defer bcancel()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.NewMutex(name).LockContext(bctx)
			errs <- err
		}()
	}
	mc := cc.NewMutex(name)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := mc.LockContext(ctxT(t))
			if err == nil {
				err = mc.UnlockContext(l)
			}
			errs <- err
		}()
	}

	counts := func() map[string]int64 {
		st, _ := inspectOne(t, holder, name, dsync.KindMutex)
		out := map[string]int64{}
		for _, w := range st.Waiters {
			out[w.Owner[:strings.IndexByte(w.Owner, '/')]] = w.Count
			if w.Place <= 0 || w.Place > 3*time.Second {
				t.Errorf("waiter %+v: entry lifetime outside (0, lease]", w)
			}
		}
		return out
	}
	// Each Client's leader registers at its first failed attempt and
	// refreshes the count at each later one (at least every lease/3 = 1 s).
	waitFor(t, 5*time.Second, "3 waiters of procb and 2 of procc", func() bool {
		n := counts()
		return len(n) == 2 && n["procb"] == 3 && n["procc"] == 2
	})

	bcancel()
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	}
	waitFor(t, 5*time.Second, "procb's entry gone once its waiters gave up", func() bool {
		n := counts()
		return len(n) == 1 && n["procc"] == 2
	})

	if err := holder.NewMutex(name).UnlockContext(lctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := counts(); len(n) != 0 {
		t.Errorf("waiters after every waiter got the lock: %v", n)
	}
}
