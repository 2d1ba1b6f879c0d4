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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
					assert.Equal(t, int32(1), inside.Add(1), "f runs concurrently")
					defer inside.Add(-1)
					runs.Add(1)
					_, ok := dsync.FencingToken(ctx)
					assert.True(t, ok, "f's context has no fencing token")
					time.Sleep(50 * time.Millisecond) // the work; widens the race window
					finished.Store(true)
					return nil
				})
				assert.NoError(t, err)
				assert.True(t, finished.Load(), "Do returned before f finished")
			}()
		}
	}
	wg.Wait()
	require.Equal(t, int32(1), runs.Load(), "runs of f")
	late := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	require.NoError(t, late.NewOnce("init").Do(ctxT(t), func(context.Context) error {
		t.Error("f ran again in a later Client")
		return nil
	}))
}

// TestOnceRetry: after f fails or panics the next caller runs it; a caller
// that waited on the failing run runs f itself; runs never overlap.
func TestOnceRetry(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	o := c.NewOnce("retry")
	boom := errors.New("boom")
	require.ErrorIs(t, o.Do(ctx, func(context.Context) error { return boom }), boom, "Do")
	require.PanicsWithValue(t, "panic in f", func() {
		o.Do(ctx, func(context.Context) error { panic("panic in f") })
	}, "Do did not re-panic f's panic")
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
			assert.Equal(t, int32(0), inside.Load(), "second run overlaps the first")
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
	require.ErrorIs(t, <-failed, boom)
	select {
	case err := <-second:
		require.NoError(t, err, "second Do")
		require.True(t, ran.Load(), "second Do")
	case <-time.After(2 * time.Second): // the fallback timer is lease/3 = 10s
		t.Fatal("waiter not woken by the failed run")
	}
	require.NoError(t, o.Do(ctx, func(context.Context) error { t.Error("ran after success"); return nil }))
}

func TestOnceMisuse(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	o := c.NewOnce("misuse")
	require.ErrorIs(t, o.Do(ctx, nil), dsync.ErrInvalidArgument, "nil f")
	require.ErrorIs(t, c.NewOnce("").Do(ctx, func(context.Context) error { return nil }), dsync.ErrInvalidArgument, "empty name")
	inner := errors.New("unset")
	err := o.Do(ctx, func(fctx context.Context) error {
		inner = o.Do(fctx, func(context.Context) error { return nil })
		// A wait by another owner ends with its context.
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, c.NewOnce("misuse").Do(short, func(context.Context) error { return nil }), context.DeadlineExceeded, "wait while running")
		return nil
	})
	require.NoError(t, err, "Do")
	require.ErrorIs(t, inner, dsync.ErrInvalidArgument, "Do")
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
	require.NoError(t, <-first, "first Do")
	require.NoError(t, <-second, "second Do")
	require.Equal(t, int32(1), runs.Load(), "runs of f")
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
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	select {
	case at := <-ran:
		d := at.Sub(killed)
		t.Logf("f re-ran %v after the runner's SIGKILL (lease %v)", d, lease)
		require.LessOrEqual(t, d, lease+500*time.Millisecond, "took more than one lease") // slack for a loaded CI machine
	case <-time.After(5 * time.Second):
		t.Fatal("f never re-ran after the runner died")
	}
	require.NoError(t, <-done)
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
	_, err := get1(ctx)
	require.Error(t, err, "the failing first run returned no error")
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
			assert.NoError(t, err)
			vals[i] = v
		}()
	}
	wg.Wait()
	want := vals[0]
	require.Equal(t, 2, want.N, "value %+v", want)
	require.Equal(t, "v", want.Name, "value %+v", want)
	require.Len(t, want.Tags, 2, "value %+v", want)
	for i, v := range vals {
		require.Equal(t, fmt.Sprint(want), fmt.Sprint(v), "value %d = %+v, want %+v", i, v, want)
	}
	late := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	v, err := dsync.OnceValue(late, "cfg", func(context.Context) (onceResult, error) {
		t.Error("f ran in a later Client")
		return onceResult{}, nil
	})(ctx)
	require.NoError(t, err, "later Client got %+v", v)
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(v), "later Client got %+v", v)
	require.Equal(t, int32(2), calls.Load(), "calls of f")
}
