package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
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
	if err := wg.Wait(ctx); err != nil {
		t.Fatalf("Wait at zero = %v", err)
	}
	if err := wg.Done(ctx); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("Done at zero = %v", err)
	}
	if err := wg.Add(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := wg.Add(ctx, -3); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("Add(-3) at 2 = %v", err)
	}
	key := prefix + ":{basic}:wg"
	if v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).AsInt64(); err != nil || v != 2 {
		t.Fatalf("counter after a refused Add = %d, %v; want 2", v, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := wg.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait at 2 = %v", err)
	}
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	waited := make(chan error, 1)
	go func() { waited <- c2.NewWaitGroup("basic").Wait(ctx) }()
	if err := wg.Done(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v at 1", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := wg.Done(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second): // the fallback timer is lease/3 = 10s
		t.Fatal("Wait not woken at zero")
	}
	if err := c.NewWaitGroup("").Add(ctx, 1); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("empty name = %v", err)
	}
}

// observeWaits counts the Waits that observed their generation, until t
// ends.
func observeWaits(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	dsync.SetWaitGroupObserved(func() { n.Add(1) })
	t.Cleanup(func() { dsync.SetWaitGroupObserved(nil) })
	return &n
}

// A Wait in progress returns when the counter reaches zero even if an Add
// raises it again at once: the generation it observed ended. It used to
// look again, see 1, and wait until its context ended (10 of 20 runs). The
// deadline is well below the fallback look (lease/3 = 10 s), so only the
// wakeup can pass it.
func TestWaitGroupZeroCrossing(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := ctxT(t)
	observed := observeWaits(t)
	wg := c.NewWaitGroup("cross")
	for run := 0; run < 20; run++ {
		if err := wg.Add(ctx, 1); err != nil {
			t.Fatal(err)
		}
		before := observed.Load()
		waited := make(chan error, 1)
		go func() { waited <- c2.NewWaitGroup("cross").Wait(ctx) }()
		waitFor(t, 5*time.Second, "the Wait to observe its generation", func() bool { return observed.Load() > before })
		if err := wg.Done(ctx); err != nil {
			t.Fatal(err)
		}
		if err := wg.Add(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("run %d: Wait = %v", run, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("run %d: Wait missed the return to zero followed by Add(1)", run)
		}
		if err := wg.Done(ctx); err != nil {
			t.Fatal(err)
		}
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
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, d := range []int64{1 << 53, 1} {
		if err := wg.Add(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if v := counter(); v != 1<<53+1 {
		t.Fatalf("counter = %d, want %d", v, int64(1<<53+1))
	}
	if err := wg.Add(ctx, -(1 << 53)); err != nil {
		t.Fatalf("Add(-2^53) = %v", err)
	}
	if err := wg.Add(ctx, math.MaxInt64); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("Add(MaxInt64) at 1 = %v, want ErrInvalidArgument", err)
	}
	if v := counter(); v != 1 {
		t.Fatalf("counter after a refused Add = %d, want 1", v)
	}
	if err := wg.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wg.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// 300 Waits over 3 Clients, through repeated zero crossings each followed
// at once by an Add: every Wait returns for the generation it observed.
func TestWaitGroupManyWaitersGenerations(t *testing.T) {
	c := newClient(t)
	clients := []*dsync.Client{c}
	for i := 0; i < 2; i++ {
		clients = append(clients, newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c))))
	}
	ctx := ctxT(t)
	observed := observeWaits(t)
	wg := c.NewWaitGroup("many")
	if err := wg.Add(ctx, 1); err != nil {
		t.Fatal(err)
	}
	const waiters = 300
	for round := 0; round < 5; round++ {
		before := observed.Load()
		done := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			w := clients[i%len(clients)].NewWaitGroup("many")
			go func() { done <- w.Wait(ctx) }()
		}
		waitFor(t, 10*time.Second, "every Wait to observe its generation", func() bool { return observed.Load() >= before+waiters })
		if err := wg.Done(ctx); err != nil {
			t.Fatal(err)
		}
		if err := wg.Add(ctx, 1); err != nil { // the next generation, at once
			t.Fatal(err)
		}
		deadline := time.After(5 * time.Second)
		for i := 0; i < waiters; i++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: Wait = %v", round, err)
				}
			case <-deadline:
				t.Fatalf("round %d: %d of %d Waits did not return", round, waiters-i, waiters)
			}
		}
	}
	if err := wg.Done(ctx); err != nil {
		t.Fatal(err)
	}
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
	if err := wg.Add(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		cmd := startChild(t, "wgdone", prefix)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if err := wg.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Do(ctx, rc.B().Get().Key(prefix+":work").Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("Wait returned with %d of 2 units of work done (%v)", n, err)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
}
