package dsync_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["wgdone"] = childWGDone
}

func TestWaitGroupBasic(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	rc := newRueidis(t)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("basic")
	require.NoError(t, wg.Wait(ctx), "Wait at zero")
	require.ErrorIs(t, wg.Done(ctx), dsync.ErrInvalidArgument, "Done at zero")
	require.NoError(t, wg.Add(ctx, 2))
	require.ErrorIs(t, wg.Add(ctx, -3), dsync.ErrInvalidArgument, "Add(-3) at 2")
	key := prefix + ":{basic}:wg"
	v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).AsInt64()
	require.NoError(t, err, "counter after a refused Add")
	require.Equal(t, int64(2), v, "counter after a refused Add")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, wg.Wait(short), context.DeadlineExceeded, "Wait at 2")
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	waited := make(chan error, 1)
	go func() { waited <- c2.NewWaitGroup("basic").Wait(ctx) }()
	require.NoError(t, wg.Done(ctx))
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v at 1", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, wg.Done(ctx))
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(2 * time.Second): // the fallback timer is lease/3 = 10s
		t.Fatal("Wait not woken at zero")
	}
	require.ErrorIs(t, c.NewWaitGroup("").Add(ctx, 1), dsync.ErrInvalidArgument, "empty name")
}

// observeWaits returns a counter of the Waits that observed their
// generation, and the option that counts them in a Client.
func observeWaits() (*atomic.Int64, dsync.Option) {
	var n atomic.Int64
	return &n, dsync.WithWaitGroupObserved(func() { n.Add(1) })
}

// A Wait in progress returns when the counter reaches zero even if an Add
// raises it again at once: the generation it observed ended. It used to
// look again, see 1, and wait until its context ended (10 of 20 runs). The
// deadline is well below the fallback look (lease/3 = 10 s), so only the
// wakeup can pass it.
func TestWaitGroupZeroCrossing(t *testing.T) {
	observed, observe := observeWaits()
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), observe)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("cross")
	for run := 0; run < 20; run++ {
		require.NoError(t, wg.Add(ctx, 1))
		before := observed.Load()
		waited := make(chan error, 1)
		go func() { waited <- c2.NewWaitGroup("cross").Wait(ctx) }()
		waitFor(t, 5*time.Second, "the Wait to observe its generation", func() bool { return observed.Load() > before })
		require.NoError(t, wg.Done(ctx))
		require.NoError(t, wg.Add(ctx, 1))
		select {
		case err := <-waited:
			require.NoError(t, err, "run %d: Wait", run)
		case <-time.After(3 * time.Second):
			t.Fatalf("run %d: Wait missed the return to zero followed by Add(1)", run)
		}
		require.NoError(t, wg.Done(ctx))
	}
}

// The counter is an exact int64: Add(2^53) then Add(1) counts the 1 (a Lua
// double lost it), and a result outside int64 is refused clearly, leaving
// the counter unchanged.
func TestWaitGroupExact(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("exact")
	counter := func() int64 {
		v, err := rc.Do(ctx, rc.B().Get().Key(prefixOf(t, c)+":{exact}:wg").Build()).AsInt64()
		require.NoError(t, err)
		return v
	}
	for _, d := range []int64{1 << 53, 1} {
		require.NoError(t, wg.Add(ctx, d))
	}
	v := counter()
	require.Equal(t, int64(1<<53+1), v, "counter = %d, want %d", v, int64(1<<53+1))
	require.NoError(t, wg.Add(ctx, -(1<<53)), "Add(-2^53)")
	require.ErrorIs(t, wg.Add(ctx, math.MaxInt64), dsync.ErrInvalidArgument, "Add(MaxInt64) at 1")
	require.Equal(t, int64(1), counter(), "counter after a refused Add")
	require.NoError(t, wg.Done(ctx))
	require.NoError(t, wg.Wait(ctx))
}

// 300 Waits over 3 Clients, through repeated zero crossings each followed
// at once by an Add: every Wait returns for the generation it observed.
func TestWaitGroupManyWaitersGenerations(t *testing.T) {
	observed, observe := observeWaits()
	c := newClient(t, observe)
	clients := []*dsync.Client{c}
	for i := 0; i < 2; i++ {
		clients = append(clients, newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)), observe))
	}
	ctx := ctxT(t)
	wg := c.NewWaitGroup("many")
	require.NoError(t, wg.Add(ctx, 1))
	const waiters = 300
	for round := 0; round < 5; round++ {
		before := observed.Load()
		done := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			w := clients[i%len(clients)].NewWaitGroup("many")
			go func() { done <- w.Wait(ctx) }()
		}
		waitFor(t, 10*time.Second, "every Wait to observe its generation", func() bool { return observed.Load() >= before+waiters })
		require.NoError(t, wg.Done(ctx))
		require.NoError(t, wg.Add(ctx, 1)) // the next generation, at once
		deadline := time.After(5 * time.Second)
		for i := 0; i < waiters; i++ {
			select {
			case err := <-done:
				require.NoError(t, err, "round %d: Wait", round)
			case <-deadline:
				t.Fatalf("round %d: %d of %d Waits did not return", round, waiters-i, waiters)
			}
		}
	}
	require.NoError(t, wg.Done(ctx))
}

// childWGDone: count one unit of work, then Done on "xproc".
func childWGDone(c *dsync.Client, rc rueidis.Client, prefix string) int {
	ctx := context.Background()
	time.Sleep(100 * time.Millisecond) // the work; Wait must not return before it
	if err := rc.Do(ctx, rc.B().Incr().Key(prefix+":work").Build()).Error(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.NewWaitGroup("xproc").Done(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestWaitGroupProcesses: Wait returns once 2 other processes are Done,
// and not before their work is complete.
func TestWaitGroupProcesses(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	rc := newRueidis(t)
	ctx := ctxT(t)
	wg := c.NewWaitGroup("xproc")
	require.NoError(t, wg.Add(ctx, 2))
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "wgdone", prefix)
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
	}
	require.NoError(t, wg.Wait(ctx))
	n, err := rc.Do(ctx, rc.B().Get().Key(prefix+":work").Build()).AsInt64()
	require.NoError(t, err, "units of work done when Wait returned")
	require.Equal(t, int64(2), n, "units of work done when Wait returned")
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child")
	}
}
