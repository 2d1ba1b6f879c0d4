package dsync_test

//lint:file-ignore SA2001 sync's tests lock and unlock with nothing between, as ported here

// Go's own sync tests ($(go env GOROOT)/src/sync: mutex_test.go,
// rwmutex_test.go, once_test.go, waitgroup_test.go, cond_test.go), ported
// to dsync's types, test by test under the same names with a Sync prefix.
// What code moved from sync may expect of dsync.
//
// Each test runs twice (syncValues): with one value shared by every
// goroutine, as the originals do, and with one value per Client on the
// same name (three Clients, as three processes would have), goroutine i
// using Client i%3's value.
//
// They pass as in sync, except three documented differences, each a test
// here asserting dsync's behaviour:
//
//  1. An Unlock of an unlocked Mutex or RWMutex is a recoverable panic
//     naming the lock (sync: a fatal error that ends the process):
//     TestSyncMutexMisuse.
//  2. A panicking Once function runs again at the next Do (sync: the Once
//     is done, and f never runs again): TestSyncOncePanic.
//  3. A negative WaitGroup counter is an error, ErrInvalidArgument, and the
//     counter is unchanged (sync: a panic): TestSyncWaitGroupMisuse.
//
// Adjustments that are not differences: loop counts are scaled down (each
// Lock is a Redis round trip, not a CAS); variables a lock guards are
// atomics, since the race detector does not see the happens-before that a
// release and an acquisition through Redis give; calls that reach Redis
// take a context (ctx) and their errors are checked; sync's c.Wait() with
// c.L taken by Lock is WaitLocked(ctx).
//
// Not ported: TestSemaphore (the runtime's semaphore), TestWaitGroupAlign
// (memory alignment), TestCondCopy (sync.Cond panics when copied; a
// dsync.Cond, a handle on state in Redis, may be copied, as its doc says),
// and the benchmarks.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["wgpanic"] = childWGPanic
}

// syncValues runs f twice: with get returning one value, made by mk, for
// every goroutine i, and with get returning Client i%3's value, each
// Client's made by mk with the same name.
func syncValues[T any](t *testing.T, mk func(c *dsync.Client) T, f func(t *testing.T, get func(i int) T)) {
	t.Run("shared", func(t *testing.T) {
		v := mk(newClient(t))
		f(t, func(int) T { return v })
	})
	t.Run("per client", func(t *testing.T) {
		c := newClient(t)
		vals := []T{mk(c)}
		for range 2 {
			vals = append(vals, mk(newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))))
		}
		f(t, func(i int) T { return vals[i%len(vals)] })
	})
}

// ----- mutex_test.go

func hammerMutex(m *dsync.Mutex, loops int, cdone chan bool) {
	for i := 0; i < loops; i++ {
		if i%3 == 0 {
			if m.TryLock() {
				m.Unlock()
			}
			continue
		}
		m.Lock()
		m.Unlock()
	}
	cdone <- true
}

func TestSyncMutex(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.Mutex { return c.NewMutex("mutex") }, func(t *testing.T, get func(int) *dsync.Mutex) {
		m := get(0)
		m.Lock()
		if get(1).TryLock() {
			t.Fatalf("TryLock succeeded with mutex locked")
		}
		m.Unlock()
		if !get(1).TryLock() {
			t.Fatalf("TryLock failed with mutex unlocked")
		}
		get(1).Unlock()

		c := make(chan bool)
		for i := 0; i < 10; i++ {
			go hammerMutex(get(i), 100, c) // sync: 1000
		}
		for i := 0; i < 10; i++ {
			<-c
		}
	})
}

// syncMisuse are sync's misuseTests, each on a lock of its own.
var syncMisuse = []struct {
	name string
	f    func(c *dsync.Client, name string)
}{
	{"Mutex.Unlock", func(c *dsync.Client, name string) {
		mu := c.NewMutex(name)
		mu.Unlock()
	}},
	{"Mutex.Unlock2", func(c *dsync.Client, name string) {
		mu := c.NewMutex(name)
		mu.Lock()
		mu.Unlock()
		mu.Unlock()
	}},
	{"RWMutex.Unlock", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.Unlock()
	}},
	{"RWMutex.Unlock2", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.RLock()
		defer mu.RUnlock() // not in sync's: the process goes on here
		mu.Unlock()
	}},
	{"RWMutex.Unlock3", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.Lock()
		mu.Unlock()
		mu.Unlock()
	}},
	{"RWMutex.RUnlock", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.RUnlock()
	}},
	{"RWMutex.RUnlock2", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.Lock()
		defer mu.Unlock()
		mu.RUnlock()
	}},
	{"RWMutex.RUnlock3", func(c *dsync.Client, name string) {
		mu := c.NewRWMutex(name)
		mu.RLock()
		mu.RUnlock()
		mu.RUnlock()
	}},
}

// TestSyncMutexMisuse: difference 1. In sync each misuse is a fatal error
// ("fatal error: sync: unlock of unlocked mutex"), which sync's test sees
// from a child process; in dsync it is a panic that recover stops, whose
// message says "unlocked" and names the lock, and the Client goes on
// working.
func TestSyncMutexMisuse(t *testing.T) {
	c := newClient(t)
	for _, test := range syncMisuse {
		name := "misuse-" + test.name
		var got any
		func() {
			defer func() { got = recover() }()
			test.f(c, name)
		}()
		msg := fmt.Sprint(got)
		if got == nil || !strings.Contains(msg, "unlocked") || !strings.Contains(msg, name) {
			t.Errorf("%s: want a panic about an unlocked lock naming %q, got %v", test.name, name, got)
		}
	}
	// Every lock is free again.
	m := c.NewMutex("misuse-Mutex.Unlock2")
	require.True(t, m.TryLock())
	m.Unlock()
	rw := c.NewRWMutex("misuse-RWMutex.RUnlock2")
	require.True(t, rw.TryLock())
	rw.Unlock()
}

func TestSyncMutexFairness(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.Mutex { return c.NewMutex("fair") }, func(t *testing.T, get func(int) *dsync.Mutex) {
		stop := make(chan bool)
		stopped := make(chan bool) // not in sync's: joined before the Clients close
		defer func() { close(stop); <-stopped }()
		go func() {
			defer close(stopped)
			mu := get(0)
			for {
				mu.Lock()
				time.Sleep(100 * time.Microsecond)
				mu.Unlock()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		done := make(chan bool, 1)
		go func() {
			mu := get(1)
			for i := 0; i < 10; i++ {
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				mu.Unlock()
			}
			done <- true
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("can't acquire Mutex in 10 seconds")
		}
	})
}

// ----- rwmutex_test.go

func parallelReader(m *dsync.RWMutex, clocked, cunlock, cdone chan bool) {
	m.RLock()
	clocked <- true
	<-cunlock
	m.RUnlock()
	cdone <- true
}

func doTestParallelReaders(get func(int) *dsync.RWMutex, numReaders int) {
	clocked := make(chan bool)
	cunlock := make(chan bool)
	cdone := make(chan bool)
	for i := 0; i < numReaders; i++ {
		go parallelReader(get(i), clocked, cunlock, cdone)
	}
	// Wait for all parallel RLock()s to succeed.
	for i := 0; i < numReaders; i++ {
		<-clocked
	}
	for i := 0; i < numReaders; i++ {
		cunlock <- true
	}
	// Wait for the goroutines to finish.
	for i := 0; i < numReaders; i++ {
		<-cdone
	}
}

func TestSyncParallelReaders(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.RWMutex { return c.NewRWMutex("readers") }, func(t *testing.T, get func(int) *dsync.RWMutex) {
		doTestParallelReaders(get, 1)
		doTestParallelReaders(get, 3)
		doTestParallelReaders(get, 4)
	})
}

func reader(rwm *dsync.RWMutex, numIterations int, activity *int32, cdone chan bool) {
	for i := 0; i < numIterations; i++ {
		rwm.RLock()
		n := atomic.AddInt32(activity, 1)
		if n < 1 || n >= 10000 {
			rwm.RUnlock()
			panic(fmt.Sprintf("wlock(%d)\n", n))
		}
		for i := 0; i < 100; i++ {
		}
		atomic.AddInt32(activity, -1)
		rwm.RUnlock()
	}
	cdone <- true
}

func writer(rwm *dsync.RWMutex, numIterations int, activity *int32, cdone chan bool) {
	for i := 0; i < numIterations; i++ {
		rwm.Lock()
		n := atomic.AddInt32(activity, 10000)
		if n != 10000 {
			rwm.Unlock()
			panic(fmt.Sprintf("wlock(%d)\n", n))
		}
		for i := 0; i < 100; i++ {
		}
		atomic.AddInt32(activity, -10000)
		rwm.Unlock()
	}
	cdone <- true
}

func hammerRWMutex(get func(int) *dsync.RWMutex, numReaders, numIterations int) {
	// Number of active readers + 10000 * number of active writers.
	var activity int32
	cdone := make(chan bool)
	go writer(get(0), numIterations, &activity, cdone)
	var i int
	for i = 0; i < numReaders/2; i++ {
		go reader(get(i+1), numIterations, &activity, cdone)
	}
	go writer(get(1), numIterations, &activity, cdone)
	for ; i < numReaders; i++ {
		go reader(get(i+1), numIterations, &activity, cdone)
	}
	// Wait for the 2 writers and all readers to finish.
	for i := 0; i < 2+numReaders; i++ {
		<-cdone
	}
}

func TestSyncRWMutex(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.RWMutex { return c.NewRWMutex("rw") }, func(t *testing.T, get func(int) *dsync.RWMutex) {
		m, m2 := get(0), get(1)
		m.Lock()
		if m2.TryLock() {
			t.Fatalf("TryLock succeeded with mutex locked")
		}
		if m2.TryRLock() {
			t.Fatalf("TryRLock succeeded with mutex locked")
		}
		m.Unlock()

		if !m2.TryLock() {
			t.Fatalf("TryLock failed with mutex unlocked")
		}
		m2.Unlock()

		if !m.TryRLock() {
			t.Fatalf("TryRLock failed with mutex unlocked")
		}
		if !m2.TryRLock() {
			t.Fatalf("TryRLock failed with mutex rlocked")
		}
		if m2.TryLock() {
			t.Fatalf("TryLock succeeded with mutex rlocked")
		}
		m.RUnlock()
		m2.RUnlock()

		n := 30 // sync: 1000, and GOMAXPROCS 1, 4 and 10 for each
		hammerRWMutex(get, 1, n)
		hammerRWMutex(get, 3, n)
		hammerRWMutex(get, 10, n)
	})
}

func TestSyncRLocker(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.RWMutex { return c.NewRWMutex("rlocker") }, func(t *testing.T, get func(int) *dsync.RWMutex) {
		wl := get(0)
		var rl sync.Locker
		wlocked := make(chan bool, 1)
		rlocked := make(chan bool, 1)
		rl = get(1).RLocker()
		n := 10
		go func() {
			for i := 0; i < n; i++ {
				rl.Lock()
				rl.Lock()
				rlocked <- true
				wl.Lock()
				wlocked <- true
			}
		}()
		for i := 0; i < n; i++ {
			<-rlocked
			rl.Unlock()
			select {
			case <-wlocked:
				t.Fatal("RLocker() didn't read-lock it")
			default:
			}
			rl.Unlock()
			<-wlocked
			select {
			case <-rlocked:
				t.Fatal("RLocker() didn't respect the write lock")
			default:
			}
			wl.Unlock()
		}
	})
}

// ----- once_test.go

type one int32

func (o *one) Increment() { atomic.AddInt32((*int32)(o), 1) }

func (o *one) get() int32 { return atomic.LoadInt32((*int32)(o)) }

func runOnce(t *testing.T, once *dsync.Once, o *one, c chan bool) {
	err := once.Do(ctxT(t), func(context.Context) error { o.Increment(); return nil })
	if err != nil {
		t.Errorf("Do: %v", err)
	}
	if v := o.get(); v != 1 {
		t.Errorf("once failed inside run: %d is not 1", v)
	}
	c <- true
}

func TestSyncOnce(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.Once { return c.NewOnce("once") }, func(t *testing.T, get func(int) *dsync.Once) {
		o := new(one)
		c := make(chan bool)
		const N = 10
		for i := 0; i < N; i++ {
			go runOnce(t, get(i), o, c)
		}
		for i := 0; i < N; i++ {
			<-c
		}
		if o.get() != 1 {
			t.Errorf("once failed outside run: %d is not 1", o.get())
		}
	})
}

// TestSyncOncePanic: difference 2. Do panics with f's value, as sync's;
// but the run counts as failed, so the next Do runs its f (sync's never
// calls f again: "Once.Do called twice" is its failure).
func TestSyncOncePanic(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.Once { return c.NewOnce("once-panic") }, func(t *testing.T, get func(int) *dsync.Once) {
		func() {
			defer func() {
				if r := recover(); r != "failed" {
					t.Fatalf("Once.Do did not panic with f's value: %v", r)
				}
			}()
			get(0).Do(ctxT(t), func(context.Context) error {
				panic("failed")
			})
		}()

		var called atomic.Bool
		require.NoError(t, get(1).Do(ctxT(t), func(context.Context) error {
			called.Store(true)
			return nil
		}))
		require.True(t, called.Load(), "the Do after a panicking f did not run its f")
		require.NoError(t, get(2).Do(ctxT(t), func(context.Context) error {
			t.Fatalf("Once.Do called after a successful run")
			return nil
		}))
	})
}

// ----- waitgroup_test.go

func testWaitGroup(t *testing.T, wg1, wg2 func(int) *dsync.WaitGroup) {
	ctx := ctxT(t)
	n := 16
	require.NoError(t, wg1(0).Add(ctx, int64(n)))
	require.NoError(t, wg2(0).Add(ctx, int64(n)))
	exited := make(chan bool, n)
	for i := 0; i != n; i++ {
		go func() {
			if err := wg1(i).Done(ctx); err != nil {
				t.Error(err)
			}
			if err := wg2(i).Wait(ctx); err != nil {
				t.Error(err)
			}
			exited <- true
		}()
	}
	require.NoError(t, wg1(n).Wait(ctx))
	for i := 0; i != n; i++ {
		select {
		case <-exited:
			t.Fatal("WaitGroup released group too soon")
		default:
		}
		require.NoError(t, wg2(i+1).Done(ctx))
	}
	for i := 0; i != n; i++ {
		<-exited // Will block if barrier fails to unlock someone.
	}
}

func TestSyncWaitGroup(t *testing.T) {
	syncValues(t, func(c *dsync.Client) [2]*dsync.WaitGroup {
		return [2]*dsync.WaitGroup{c.NewWaitGroup("wg1"), c.NewWaitGroup("wg2")}
	}, func(t *testing.T, get func(int) [2]*dsync.WaitGroup) {
		wg1 := func(i int) *dsync.WaitGroup { return get(i)[0] }
		wg2 := func(i int) *dsync.WaitGroup { return get(i)[1] }
		// Run the same test a few times to ensure barrier is in a proper state.
		for i := 0; i != 8; i++ {
			testWaitGroup(t, wg1, wg2)
		}
	})
}

// TestSyncWaitGroupMisuse: difference 3. sync panics with "sync: negative
// WaitGroup counter"; dsync's Done returns an error that errors.Is
// ErrInvalidArgument and names the WaitGroup, and leaves the counter at 0.
func TestSyncWaitGroupMisuse(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.WaitGroup { return c.NewWaitGroup("misuse") }, func(t *testing.T, get func(int) *dsync.WaitGroup) {
		ctx := ctxT(t)
		require.NoError(t, get(0).Add(ctx, 1))
		require.NoError(t, get(1).Done(ctx))
		err := get(2).Done(ctx)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		require.ErrorContains(t, err, "misuse")
		require.NoError(t, get(0).Wait(ctx), "the counter is not 0")
	})
}

func TestSyncWaitGroupRace(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.WaitGroup { return c.NewWaitGroup("race") }, func(t *testing.T, get func(int) *dsync.WaitGroup) {
		ctx := ctxT(t)
		for i := 0; i < 100; i++ { // sync: 1000
			n := new(int32)
			// Not in sync's: the goroutines' Done calls return (their
			// replies can come after Wait's wakeup) before the test ends.
			var joined sync.WaitGroup
			// spawn goroutine 1
			require.NoError(t, get(0).Add(ctx, 1))
			joined.Go(func() {
				atomic.AddInt32(n, 1)
				if err := get(1).Done(ctx); err != nil {
					t.Error(err)
				}
			})
			// spawn goroutine 2
			require.NoError(t, get(0).Add(ctx, 1))
			joined.Go(func() {
				atomic.AddInt32(n, 1)
				if err := get(2).Done(ctx); err != nil {
					t.Error(err)
				}
			})
			// Wait for goroutine 1 and 2
			require.NoError(t, get(0).Wait(ctx))
			if atomic.LoadInt32(n) != 2 {
				t.Fatal("Spurious wakeup from Wait")
			}
			joined.Wait()
		}
	})
}

func TestSyncWaitGroupGo(t *testing.T) {
	syncValues(t, func(c *dsync.Client) *dsync.WaitGroup { return c.NewWaitGroup("go") }, func(t *testing.T, get func(int) *dsync.WaitGroup) {
		ctx := ctxT(t)
		var i atomic.Int32
		require.NoError(t, get(0).Go(ctx, func() {
			i.Add(1)
		}))
		require.NoError(t, get(1).Wait(ctx))
		if i.Load() != 1 {
			t.Fatalf("got %d, want 1", i.Load())
		}
	})
}

// childWGPanic: a task started by Go panics; the process must die of it
// without Wait returning.
func childWGPanic(c *dsync.Client, _ rueidis.Client, _ string) int {
	ctx := context.Background()
	wg := c.NewWaitGroup("issue76126")
	if err := wg.Go(ctx, func() { panic("test") }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := wg.Wait(ctx); err != nil { // process should terminate here
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "Wait returned")
	return 0
}

// TestSyncIssue76126: an unhandled panic in a Go goroutine terminates the
// process without causing Wait to unblock; and, across processes, without
// a Done: the counter stays at 1.
func TestSyncIssue76126(t *testing.T) {
	prefix := testPrefix(t)
	cmd := startChild(t, "wgpanic", prefix)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child did not fail: %s", stderr.String())
	got := stderr.String()
	require.Contains(t, got, "panic: test")
	require.NotContains(t, got, "Wait returned")
	rc := newRueidis(t)
	n, err := rc.Do(ctxT(t), rc.B().Get().Key(prefix+":{issue76126}:wg").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the counter after the panicking task")
}

// ----- cond_test.go

// condPair is a Mutex and its Cond, sync.Cond's L and itself.
type condPair struct {
	m  *dsync.Mutex
	cd *dsync.Cond
}

func newCondPair(name string) func(c *dsync.Client) condPair {
	return func(c *dsync.Client) condPair {
		m := c.NewMutex(name)
		return condPair{m, c.NewCond(m)}
	}
}

// wait is sync's c.Wait(): WaitLocked, whose error fails the test.
func (p condPair) wait(t *testing.T, ctx context.Context) {
	if err := p.cd.WaitLocked(ctx); err != nil {
		t.Error(err)
	}
}

func TestSyncCondSignal(t *testing.T) {
	syncValues(t, newCondPair("signal"), func(t *testing.T, get func(int) condPair) {
		ctx := ctxT(t)
		n := 2
		running := make(chan bool, n)
		awake := make(chan bool, n)
		var joined sync.WaitGroup // not in sync's: each Unlock returns before the Clients close
		defer joined.Wait()
		for i := 0; i < n; i++ {
			joined.Go(func() {
				p := get(i)
				p.m.Lock()
				running <- true
				p.wait(t, ctx)
				awake <- true
				p.m.Unlock()
			})
		}
		for i := 0; i < n; i++ {
			<-running // Wait for everyone to run.
		}
		p := get(n)
		for n > 0 {
			select {
			case <-awake:
				t.Fatal("goroutine not asleep")
			default:
			}
			p.m.Lock()
			require.NoError(t, p.cd.Signal(ctx))
			p.m.Unlock()
			<-awake // Will deadlock if no goroutine wakes up
			select {
			case <-awake:
				t.Fatal("too many goroutines awake")
			default:
			}
			n--
		}
		require.NoError(t, p.cd.Signal(ctx))
	})
}

func TestSyncCondSignalGenerations(t *testing.T) {
	syncValues(t, newCondPair("generations"), func(t *testing.T, get func(int) condPair) {
		ctx := ctxT(t)
		n := 20 // sync: 100
		running := make(chan bool, n)
		awake := make(chan int, n)
		p := get(n)
		var joined sync.WaitGroup // not in sync's: each Unlock returns before the Clients close
		defer joined.Wait()
		for i := 0; i < n; i++ {
			joined.Go(func() {
				p := get(i)
				p.m.Lock()
				running <- true
				p.wait(t, ctx)
				awake <- i
				p.m.Unlock()
			})
			if i > 0 {
				a := <-awake
				if a != i-1 {
					t.Fatalf("wrong goroutine woke up: want %d, got %d", i-1, a)
				}
			}
			<-running
			p.m.Lock()
			require.NoError(t, p.cd.Signal(ctx))
			p.m.Unlock()
		}
		<-awake // not in sync's: the last one, before the Clients close
	})
}

func TestSyncCondBroadcast(t *testing.T) {
	syncValues(t, newCondPair("broadcast"), func(t *testing.T, get func(int) condPair) {
		ctx := ctxT(t)
		n := 8 // sync: 200
		running := make(chan int, n)
		awake := make(chan int, n)
		var exit atomic.Bool
		exited := make(chan bool, n) // not in sync's: the goroutines end before the Clients close
		for i := 0; i < n; i++ {
			go func(g int) {
				p := get(g)
				p.m.Lock()
				for !exit.Load() {
					running <- g
					p.wait(t, ctx)
					awake <- g
				}
				p.m.Unlock()
				exited <- true
			}(i)
		}
		p := get(n)
		for i := 0; i < n; i++ {
			for i := 0; i < n; i++ {
				<-running // Will deadlock unless n are running.
			}
			if i == n-1 {
				p.m.Lock()
				exit.Store(true)
				p.m.Unlock()
			}
			select {
			case <-awake:
				t.Fatal("goroutine not asleep")
			default:
			}
			p.m.Lock()
			require.NoError(t, p.cd.Broadcast(ctx))
			p.m.Unlock()
			seen := make([]bool, n)
			for i := 0; i < n; i++ {
				g := <-awake
				if seen[g] {
					t.Fatal("goroutine woke up twice")
				}
				seen[g] = true
			}
		}
		for i := 0; i < n; i++ {
			<-exited
		}
		select {
		case <-running:
			t.Fatal("goroutine did not exit")
		default:
		}
		require.NoError(t, p.cd.Broadcast(ctx))
	})
}

func TestSyncRace(t *testing.T) {
	syncValues(t, newCondPair("race"), func(t *testing.T, get func(int) condPair) {
		ctx := ctxT(t)
		var x atomic.Int32
		done := make(chan bool)
		go func() {
			c := get(0)
			c.m.Lock()
			x.Store(1)
			c.wait(t, ctx)
			if x.Load() != 2 {
				t.Error("want 2")
			}
			x.Store(3)
			if err := c.cd.Signal(ctx); err != nil {
				t.Error(err)
			}
			c.m.Unlock()
			done <- true
		}()
		go func() {
			c := get(1)
			c.m.Lock()
			for {
				if x.Load() == 1 {
					x.Store(2)
					if err := c.cd.Signal(ctx); err != nil {
						t.Error(err)
					}
					break
				}
				c.m.Unlock()
				runtime.Gosched()
				c.m.Lock()
			}
			c.m.Unlock()
			done <- true
		}()
		go func() {
			c := get(2)
			c.m.Lock()
			for {
				if x.Load() == 2 {
					c.wait(t, ctx)
					if x.Load() != 3 {
						t.Error("want 3")
					}
					break
				}
				if x.Load() == 3 {
					break
				}
				c.m.Unlock()
				runtime.Gosched()
				c.m.Lock()
			}
			c.m.Unlock()
			done <- true
		}()
		<-done
		<-done
		<-done
	})
}

func TestSyncCondSignalStealing(t *testing.T) {
	syncValues(t, newCondPair("stealing"), func(t *testing.T, get func(int) condPair) {
		ctx := ctxT(t)
		for iters := 0; iters < 20; iters++ { // sync: 1000, each with a new Mutex
			// Start a waiter.
			ch := make(chan struct{})
			go func() {
				c := get(0)
				c.m.Lock()
				ch <- struct{}{}
				c.wait(t, ctx)
				c.m.Unlock()

				ch <- struct{}{}
			}()

			<-ch
			m := get(1).m
			m.Lock()
			m.Unlock()

			// We know that the waiter is in the cond.Wait() call because we
			// synchronized with it, then acquired/released the mutex it was
			// holding when we synchronized.
			//
			// Start two goroutines that will race: one will broadcast on
			// the cond var, the other will wait on it.
			//
			// The new waiter may or may not get notified, but the first one
			// has to be notified.
			var done atomic.Bool
			broadcast := make(chan bool) // not in sync's: joined before the test ends
			go func() {
				if err := get(1).cd.Broadcast(ctx); err != nil {
					t.Error(err)
				}
				close(broadcast)
			}()

			second := make(chan bool) // not in sync's: the next round reuses the name
			go func() {
				c := get(2)
				c.m.Lock()
				for !done.Load() {
					c.wait(t, ctx)
				}
				c.m.Unlock()
				close(second)
			}()

			// Check that the first waiter does get signaled.
			<-ch

			// Release the second waiter in case it didn't get the
			// broadcast.
			m.Lock()
			done.Store(true)
			m.Unlock()
			require.NoError(t, get(1).cd.Broadcast(ctx))
			<-second
			<-broadcast
		}
	})
}
