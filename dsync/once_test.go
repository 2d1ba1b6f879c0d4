package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

func init() {
	childRoles["oncehang"] = childOnceHang
}

// TestOnceConcurrent: 2 Clients x 10 goroutines; f runs once, every Do
// returns after it succeeded, and later Clients do not run it again.
func TestOnceConcurrent(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	clients := []*dsync.Client{c, newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))}
	var runs, inside atomic.Int32
	var finished atomic.Bool
	var wg sync.WaitGroup
	for _, cl := range clients {
		for g := 0; g < 10; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := cl.NewOnce("init").Do(ctxT(t), func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						t.Error("f runs concurrently")
					}
					defer inside.Add(-1)
					runs.Add(1)
					if _, ok := dsync.FencingToken(ctx); !ok {
						t.Error("f's context has no fencing token")
					}
					time.Sleep(50 * time.Millisecond) // the work; widens the race window
					finished.Store(true)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if !finished.Load() {
					t.Error("Do returned before f finished")
				}
			}()
		}
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("f ran %d times", n)
	}
	late := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	if err := late.NewOnce("init").Do(ctxT(t), func(context.Context) error {
		t.Error("f ran again in a later Client")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestOnceRetry: after f fails or panics the next caller runs it; a caller
// that waited on the failing run runs f itself; runs never overlap.
func TestOnceRetry(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	o := c.NewOnce("retry")
	boom := errors.New("boom")
	if err := o.Do(ctx, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want f's error", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "panic in f" {
				t.Fatalf("recovered %v, want f's panic", r)
			}
		}()
		o.Do(ctx, func(context.Context) error { panic("panic in f") })
		t.Fatal("Do did not re-panic")
	}()
	// A failing run in progress; a second caller waits for it, then runs.
	var inside atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		failed <- o.Do(ctx, func(context.Context) error {
			inside.Add(1)
			defer inside.Add(-1)
			close(started)
			<-release
			return boom
		})
	}()
	<-started
	var ran atomic.Bool
	second := make(chan error, 1)
	go func() {
		second <- o.Do(ctx, func(context.Context) error {
			if inside.Load() != 0 {
				t.Error("second run overlaps the first")
			}
			ran.Store(true)
			return nil
		})
	}()
	select {
	case err := <-second:
		t.Fatalf("second Do returned %v while the first ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-failed; !errors.Is(err, boom) {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if err != nil || !ran.Load() {
			t.Fatalf("second Do = %v, ran %v", err, ran.Load())
		}
	case <-time.After(2 * time.Second): // the fallback timer is lease/3 = 10s
		t.Fatal("waiter not woken by the failed run")
	}
	if err := o.Do(ctx, func(context.Context) error { t.Error("ran after success"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestOnceMisuse(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	o := c.NewOnce("misuse")
	if err := o.Do(ctx, nil); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("nil f = %v", err)
	}
	if err := c.NewOnce("").Do(ctx, func(context.Context) error { return nil }); !errors.Is(err, dsync.ErrInvalidArgument) {
		t.Fatalf("empty name = %v", err)
	}
	inner := errors.New("unset")
	err := o.Do(ctx, func(fctx context.Context) error {
		inner = o.Do(fctx, func(context.Context) error { return nil })
		// A wait by another owner ends with its context.
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := c.NewOnce("misuse").Do(short, func(context.Context) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait while running = %v", err)
		}
		return nil
	})
	if err != nil || !errors.Is(inner, dsync.ErrInvalidArgument) {
		t.Fatalf("Do = %v, nested Do = %v", err, inner)
	}
}

// Two concurrent Do calls whose contexts carry the same owner, neither
// inside f, on two Clients: the second waits for the first run and sees it
// done (it used to fail with "Do called from inside its own f", since the
// check was made per owner). A Do through f's context is still refused.
func TestOnceSameOwnerConcurrent(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	ctx := dsync.WithOwner(ctxT(t))
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	first := make(chan error, 1)
	go func() {
		first <- c.NewOnce("same-owner").Do(ctx, func(fctx context.Context) error {
			runs.Add(1)
			close(started)
			<-finish
			return nil
		})
	}()
	<-started
	second := make(chan error, 1)
	go func() {
		second <- c2.NewOnce("same-owner").Do(ctx, func(context.Context) error {
			runs.Add(1)
			return nil
		})
	}()
	// The second call must be waiting (subscribed for the run's end), not
	// failed, while the run goes on.
	waitSubscribed(t, newRueidis(t), prefixOf(t, c)+":{same-owner}:once:ch")
	select {
	case err := <-second:
		t.Fatalf("second Do with the same owner returned %v while the first ran, want it to wait", err)
	default:
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatalf("first Do = %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second Do = %v, want nil (the run is done)", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("f ran %d times, want 1", n)
	}
}

// childOnceHang: run Do("crash") with an f that prints "running" and never
// returns.
func childOnceHang(c *dsync.Client, rc rueidis.Client, prefix string) int {
	err := c.NewOnce("crash").Do(context.Background(), func(context.Context) error {
		fmt.Println("running")
		select {}
	})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestOnceRunnerKilled: when the runner's process dies, a waiting caller
// runs f once the runner's lease (1s) lapses.
func TestOnceRunnerKilled(t *testing.T) {
	prefix := testPrefix(t)
	const lease = time.Second
	cmd := childSaying(t, "running", "oncehang", prefix, "DSYNC_TEST_LEASE="+lease.String())
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	ran := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.NewOnce("crash").Do(ctx, func(context.Context) error {
			ran <- time.Now()
			return nil
		})
	}()
	// The child is alive and renewing: nobody else runs f meanwhile.
	select {
	case <-ran:
		t.Fatal("f ran while the runner was alive")
	case <-time.After(lease + lease/2):
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case at := <-ran:
		d := at.Sub(killed)
		t.Logf("f re-ran %v after the runner's SIGKILL (lease %v)", d, lease)
		if d > lease+500*time.Millisecond { // slack for a loaded CI machine
			t.Fatalf("took %v, more than one lease", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("f never re-ran after the runner died")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type onceResult struct {
	N    int
	Name string
	Tags []string
}

// TestOnceValue: every Client, including one created later, gets the value
// of the single successful run; a failed run is retried.
func TestOnceValue(t *testing.T) {
	c := newClient(t)
	prefix := prefixOf(t, c)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	var calls atomic.Int32
	f := func(ctx context.Context) (onceResult, error) {
		if calls.Add(1) == 1 {
			return onceResult{}, errors.New("first try fails")
		}
		return onceResult{N: int(calls.Load()), Name: "v", Tags: []string{"a", "b"}}, nil
	}
	get1 := dsync.OnceValue(c, "cfg", f)
	get2 := dsync.OnceValue(c2, "cfg", f)
	ctx := ctxT(t)
	if _, err := get1(ctx); err == nil {
		t.Fatal("the failing first run returned no error")
	}
	var wg sync.WaitGroup
	vals := make([]onceResult, 10)
	for i := range vals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get := get1
			if i%2 == 1 {
				get = get2
			}
			v, err := get(ctx)
			if err != nil {
				t.Error(err)
			}
			vals[i] = v
		}()
	}
	wg.Wait()
	want := vals[0]
	if want.N != 2 || want.Name != "v" || len(want.Tags) != 2 {
		t.Fatalf("value %+v", want)
	}
	for i, v := range vals {
		if fmt.Sprint(v) != fmt.Sprint(want) {
			t.Fatalf("value %d = %+v, want %+v", i, v, want)
		}
	}
	late := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	v, err := dsync.OnceValue(late, "cfg", func(context.Context) (onceResult, error) {
		t.Error("f ran in a later Client")
		return onceResult{}, nil
	})(ctx)
	if err != nil || fmt.Sprint(v) != fmt.Sprint(want) {
		t.Fatalf("later Client got %+v, %v", v, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("f called %d times", n)
	}
}
