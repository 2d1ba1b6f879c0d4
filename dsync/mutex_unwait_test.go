package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// A wait for a Mutex that gives up must not take away a newer wait's
// registration (issue 24, point 5). In one Client, wait A gives up on its
// deadline and wait B starts at once; the holder, on another Client,
// releases 300 ms later. A's end is sent to Redis in the background
// (mutex_unwait.lua); when it ran after B's attempt had registered, it
// deleted the Client's one entry in the waiting hash and the lock's " w"
// mark, so the release published nothing and B slept until its fallback
// (lease/3: 1 s here, ~700 ms after the release). 720 such pairs, 48 lock
// names at a time: B must get the lock within 100 ms of every release.
func TestMutexUnwaitKeepsNewerWait(t *testing.T) {
	const (
		names     = 48
		pairs     = 15 // per name: 720 in all
		lease     = 3 * time.Second
		giveUp    = 50 * time.Millisecond
		holdAfter = 300 * time.Millisecond
		bound     = 100 * time.Millisecond
	)
	ctx := ctxT(t)
	ca := newClient(t, dsync.WithLease(lease))
	cb := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, ca)), dsync.WithLease(lease))
	var (
		mu    sync.Mutex
		waits []time.Duration // B's acquisition after the release was sent
		fails []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fails = append(fails, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("unwait%d", n)
			holder, waiter := ca.NewMutex(name), cb.NewMutex(name)
			for p := range pairs {
				hctx, err := holder.LockContext(ctx)
				if err != nil {
					fail("%s pair %d: holder: %v", name, p, err)
					return
				}
				actx, cancel := context.WithTimeout(ctx, giveUp)
				_, err = waiter.LockContext(actx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					fail("%s pair %d: wait A = %v, want its deadline", name, p, err)
					return
				}
				got := make(chan time.Time, 1)
				var bctx context.Context
				go func() {
					var err error
					bctx, err = waiter.LockContext(ctx) // B, at once
					if err != nil {
						fail("%s pair %d: wait B: %v", name, p, err)
					}
					got <- time.Now()
				}()
				time.Sleep(holdAfter) // the scenario: the holder releases 300 ms later
				released := time.Now()
				if err := holder.UnlockContext(hctx); err != nil {
					fail("%s pair %d: holder's release: %v", name, p, err)
				}
				var at time.Time
				select {
				case at = <-got:
				case <-time.After(5 * time.Second):
					fail("%s pair %d: B not woken 5 s after the release", name, p)
					return
				}
				d := at.Sub(released)
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
				if d > bound {
					fail("%s pair %d: B got the lock %v after the release", name, p, d.Round(time.Millisecond))
				}
				if bctx != nil {
					_ = waiter.UnlockContext(bctx)
				}
			}
		}()
	}
	wg.Wait()
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	late := 0
	for _, d := range waits {
		if d > bound {
			late++
		}
	}
	if len(waits) > 0 {
		t.Logf("%d pairs: %d woken > %v after the release; p50 %v, max %v", len(waits), late, bound,
			waits[len(waits)/2].Round(time.Microsecond), waits[len(waits)-1].Round(time.Millisecond))
	}
	require.Empty(t, fails, "%d of %d pairs failed", len(fails), names*pairs)
}
