package faults

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/require"
)

// TestFaultSharedDial: rueidis makes a connection once for all the callers
// that need it, under the context of the first; when that context ends
// during the dial, the others used to fail with "dsync: redis connection:
// context deadline exceeded" though their own contexts were live (the chaos
// scenario's "errors" column: waits of 1-50 ms given up during reconnects
// after a SIGKILL). Here a 20 ms acquisition starts the dial through a
// 100 ms round trip after the server dropped every connection, and five
// acquisitions with 5 s left wait for the same dial: none may fail (50 of
// 50 failed before the Client resent such commands).
func TestFaultSharedDial(t *testing.T) {
	srv := startRedis(t)
	px := newProxy(t, srv.Addr)
	rc := client(t, px.Addr)
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(testPrefix()), dsync.WithLease(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Inspect(context.Background(), "s")
	require.NoError(t, err)
	off := px.latency(t, 50*time.Millisecond)
	defer off()
	var failed, cut atomic.Int32
	for round := range 10 {
		// Every connection dropped: the next call dials. rueidis finds a
		// connection closed when it next uses it (that call fails with
		// EOF, rightly): a PING does, until one fails.
		require.Eventually(t, func() bool {
			_ = srv.do(t, "CLIENT", "KILL", "TYPE", "normal").Error()
			_ = srv.do(t, "CLIENT", "KILL", "TYPE", "pubsub").Error()
			return rc.Do(context.Background(), rc.B().Ping().Build()).Error() != nil
		}, 5*time.Second, time.Millisecond, "a PING to find its connection closed")
		lctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := c.NewSemaphore("s", 100).TryAcquire(lctx, 1)
			if errors.Is(err, context.DeadlineExceeded) {
				cut.Add(1)
			}
		}()
		// The injected timing: the short call asks for the connection
		// first.
		time.Sleep(2 * time.Millisecond)
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
				defer c2()
				lctx, ok, err := c.NewSemaphore("s", 100).TryAcquire(ctx, 1)
				if err != nil {
					failed.Add(1)
					t.Errorf("round %d: an acquisition with %v left failed: %v", round, time.Until(deadline(ctx)).Round(time.Millisecond), err)
					return
				}
				if ok {
					require.NoError(t, c.NewSemaphore("s", 100).Release(lctx, 1))
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	t.Logf("10 rounds: %d short acquisitions cut by their deadline, %d acquisitions with a live context failed", cut.Load(), failed.Load())
	require.NotZero(t, cut.Load(), "no short acquisition was cut short: the scenario did not happen")
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
