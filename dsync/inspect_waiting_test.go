package dsync_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)

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
			assert.Positive(t, w.Place, "waiter %+v: entry lifetime", w)
			assert.LessOrEqual(t, w.Place, 3*time.Second, "waiter %+v: entry lifetime beyond the lease", w)
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
		require.ErrorIs(t, <-errs, context.Canceled, "cancelled waiter")
	}
	waitFor(t, 5*time.Second, "procb's entry gone once its waiters gave up", func() bool {
		n := counts()
		return len(n) == 1 && n["procc"] == 2
	})

	require.NoError(t, holder.NewMutex(name).UnlockContext(lctx))
	wg.Wait()
	for range 2 {
		require.NoError(t, <-errs)
	}
	// A Client's goroutines queued behind its own leader or holder are
	// counted too, by an entry written countDelay (10 ms) after its queue
	// changes: gone within that once the last one got the lock.
	waitFor(t, time.Second, "no waiter counted after every waiter got the lock", func() bool { return len(counts()) == 0 })
}

// Inspect counts every waiter, the holder's own Client's included: 7
// goroutines of the holder's Client (for a Mutex, in its local queue,
// which Redis does not see otherwise) and 3 of another Client make 10, per
// Client as known. When they give up, the counts go.
func TestInspectCountsHolderClientWaiters(t *testing.T) {
	for _, kind := range []dsync.Kind{dsync.KindMutex, dsync.KindFairMutex} {
		t.Run(string(kind), func(t *testing.T) {
			holder := newClient(t, dsync.WithLease(3*time.Second), dsync.WithClientName("holder"))
			other := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, holder)), dsync.WithLease(3*time.Second), dsync.WithClientName("other"))
			type lk struct {
				lock   func(context.Context) (context.Context, error)
				unlock func(context.Context) error
			}
			mk := func(c *dsync.Client) lk {
				if kind == dsync.KindFairMutex {
					m := c.NewFairMutex("ten")
					return lk{m.LockContext, m.UnlockContext}
				}
				m := c.NewMutex("ten")
				return lk{m.LockContext, m.UnlockContext}
			}
			h := mk(holder)
			held, err := h.lock(ctxT(t))
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctxT(t))
			var wg sync.WaitGroup
			for i := range 10 {
				c := holder
				if i >= 7 {
					c = other
				}
				l := mk(c)
				wg.Go(func() { _, _ = l.lock(wctx) })
			}
			count := func() (total int64, per map[string]int64) {
				st, _ := inspectOne(t, holder, "ten", kind)
				per = map[string]int64{}
				for _, w := range st.Waiters {
					total += w.Count
					per[w.Owner[:strings.IndexByte(w.Owner, '/')]] += w.Count
				}
				return total, per
			}
			waitFor(t, 10*time.Second, "10 waiters counted", func() bool { n, _ := count(); return n == 10 })
			_, per := count()
			assert.Equal(t, map[string]int64{"holder": 7, "other": 3}, per, "waiters per Client")
			cancel()
			wg.Wait()
			waitFor(t, 10*time.Second, "no waiter counted once they gave up", func() bool { n, _ := count(); return n == 0 })
			require.NoError(t, h.unlock(held))
		})
	}
}

// The local waiters' counts stay written for as long as goroutines wait,
// not only for the first cleanup budget (2 s) of the loop that writes
// them: that loop ran under one background context, so once it was older
// than cleanupTimeout every write failed, a count stopped changing, and
// the entry outlived the waits (the soak found one left after a Close).
// The 2 s wait below is that age, the fault itself.
func TestLocalWaiterCountsOutliveCleanupBudget(t *testing.T) {
	c := newClient(t, dsync.WithLease(30*time.Second), dsync.WithClientName("holder"))
	m := c.NewMutex("aging")
	held, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	count := func() int64 { return waitingCount(t, c, "aging", dsync.KindMutex) }
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	wg.Go(func() { _, _ = c.NewMutex("aging").LockContext(wctx) })
	waitFor(t, 10*time.Second, "1 waiter counted", func() bool { return count() == 1 })
	time.Sleep(dsync.CleanupTimeout + 500*time.Millisecond) // the writer's age past its old budget
	wg.Go(func() { _, _ = c.NewMutex("aging").LockContext(wctx) })
	waitFor(t, 10*time.Second, "2 waiters counted after the first cleanup budget", func() bool { return count() == 2 })
	cancel()
	wg.Wait()
	waitFor(t, 10*time.Second, "no waiter counted once they gave up", func() bool { return count() == 0 })
	require.NoError(t, m.UnlockContext(held))
}
