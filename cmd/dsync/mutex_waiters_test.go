package main

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

// A contended Mutex: its waiters queue inside their process, and still
// inspect and top count them (per waiting Client, in Redis).
func TestCLIInspectAndTopContendedMutex(t *testing.T) {
	e := newEnv(t)
	// A 3 s lease: a waiting Client refreshes its count at least every
	// lease/3, so the 4 goroutines are all counted within a second.
	newClient := func() *dsync.Client {
		c, err := dsync.NewClient(srv.Client(t), dsync.WithKeyPrefix(e.prefix), dsync.WithLease(3*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiters := newClient(), newClient()
	ctx := context.Background()
	held, err := holder.NewMutex("hot").LockContext(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = waiters.NewMutex("hot").LockContext(wctx)
		}()
	}
	var out string
	waitFor(t, 5*time.Second, "4 waiters counted", func() bool {
		var code int
		code, out, _ = e.run(ctx, "inspect", "hot")
		return code == 0 && strings.Contains(out, "waiters 4, in 1 clients")
	})
	t.Logf("dsync inspect hot:\n%s", out)
	assert.Contains(t, out, "goroutines 4", "inspect names the waiting Client's goroutines")

	tctx, stop := context.WithCancel(ctx)
	var tout, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(tctx, []string{"--prefix", e.prefix, "--interval", "1h", "top"}, func(k string) string { return e.vars[k] }, &tout, &errb)
	}()
	waitFor(t, 5*time.Second, "a snapshot", func() bool { return strings.Contains(tout.String(), "hot") })
	stop()
	require.Zero(t, <-done, "top's exit status: %s", errb.String())
	t.Logf("dsync top:\n%s", tout.String())
	lines := strings.Split(strings.TrimSpace(tout.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "top printed:\n%s", tout.String())
	f := strings.Fields(lines[2])
	require.GreaterOrEqual(t, len(f), 5, "hot row %q", lines[2])
	assert.Equal(t, []string{"mutex", "1", "4"}, f[:3], "hot row %q: kind, holders, waiters", lines[2])
	assert.NotEqual(t, "-", f[3], "hot row %q: a hold age", lines[2])
	cancel()
	wg.Wait()
	require.NoError(t, holder.NewMutex("hot").UnlockContext(held))
}
