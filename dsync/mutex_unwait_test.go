package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A wait for a Mutex that gives up must not take away a newer wait's
// registration (issue 24, point 5). In one Client, wait A gives up on its
// deadline and wait B starts at once; the holder, on another Client,
// releases 300 ms later. A's end is sent to Redis in the background
// (mutex_unwait.lua); when it ran after B's attempt had registered, it
// deleted the Client's one entry in the waiting hash and the lock's " w"
// mark, so the release published nothing and B slept until its fallback
// poll (lease/3).
//
// The test asserts the mechanism, not how soon B runs: the waiter's
// Client has a lease of a minute, so its fallback poll is 20 s away, and B
// must get the lock within 10 s of its call: only the release's wakeup
// message (or a first attempt that found the lock already free) can end
// its wait by then, however busy the CPUs. A subscriber of its own counts
// the wakeups the releases published: some must have been (B waited, was
// woken by a message and took it), or the test checked nothing. 720
// pairs, 48 lock names at a time.
func TestMutexUnwaitKeepsNewerWait(t *testing.T) {
	const (
		names     = 48
		pairs     = 15 // per name: 720 in all
		lease     = time.Minute
		giveUp    = 50 * time.Millisecond
		holdAfter = 300 * time.Millisecond
		// B's deadline: well before its fallback poll (lease/3).
		woken = lease / 6
	)
	ctx := ctxT(t)
	ca := newClient(t, dsync.WithLease(lease))
	prefix := prefixOf(t, ca)
	cb := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))

	// The releases' wakeups, counted per lock as Redis sends them.
	sub := newRueidis(t)
	var published atomic.Int64
	perName := make([]atomic.Int64, names)
	subCtx, stopSub := context.WithCancel(context.Background())
	subscribed := make(chan struct{})
	subDone := make(chan error, 1)
	go func() {
		hooked := rueidis.WithOnSubscriptionHook(subCtx, func(rueidis.PubSubSubscription) {
			select {
			case <-subscribed:
			default:
				close(subscribed)
			}
		})
		subDone <- sub.Receive(hooked, sub.B().Psubscribe().Pattern(prefix+":{unwait*}:mutex:ch").Build(), func(m rueidis.PubSubMessage) {
			var n int
			if _, err := fmt.Sscanf(strings.TrimPrefix(m.Channel, prefix+":{unwait"), "%d}", &n); err == nil && n >= 0 && n < names {
				perName[n].Add(1)
				published.Add(1)
			}
		})
	}()
	defer func() { stopSub(); <-subDone }()
	select {
	case <-subscribed:
	case err := <-subDone:
		t.Fatalf("subscribing to the wakeups: %v", err)
	case <-ctx.Done():
		t.Fatal("not subscribed to the wakeups")
	}

	var (
		mu    sync.Mutex
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
				got := make(chan error, 1)
				var bctx context.Context
				go func() {
					wctx, cancel := context.WithTimeout(ctx, woken)
					defer cancel()
					var err error
					bctx, err = waiter.LockContext(wctx) // B, at once
					got <- err
				}()
				time.Sleep(holdAfter) // the scenario: the holder releases 300 ms later
				if err := holder.UnlockContext(hctx); err != nil {
					fail("%s pair %d: holder's release: %v", name, p, err)
				}
				if err := <-got; err != nil {
					fail("%s pair %d: wait B not woken by the release within %v (its fallback poll is lease/3 = %v away): %v", name, p, woken, lease/3, err)
					return
				}
				_ = waiter.UnlockContext(bctx)
			}
		}()
	}
	wg.Wait()
	// The wakeups reach the subscriber on its own connection: wait for
	// the first, if none has come yet.
	for deadline := time.Now().Add(2 * time.Second); published.Load() == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	n, none := published.Load(), 0
	for i := range perName {
		if perName[i].Load() == 0 {
			none++
		}
	}
	t.Logf("%d pairs: %d releases published a wakeup (the others' B took the lock at its first attempt); %d of %d locks saw none", names*pairs, n, none, names)
	require.Empty(t, fails, "%d of %d pairs failed", len(fails), names*pairs)
	require.NotZero(t, n, "no release published a wakeup: no B waited, nothing was checked")
	require.LessOrEqual(t, n, int64(names*pairs), "more wakeups than releases")
}
