package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
