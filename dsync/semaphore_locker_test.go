package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tryLocker is a sync.Locker with TryLock, as Semaphore.Locker's is.
type tryLocker interface {
	sync.Locker
	TryLock() bool
}

// semHeldInRedis is the number of permits of the semaphore called name
// that Redis counts as held (its size less its free permits).
func semHeldInRedis(c *dsync.Client, name string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	states, err := c.Inspect(ctx, name)
	if err != nil {
		return 0, err
	}
	for _, st := range states {
		if st.Kind == dsync.KindSemaphore {
			return st.Size - st.Free, nil
		}
	}
	return 0, errors.New("no semaphore in Redis")
}

// hammerLockers runs a goroutine per entry of lockers, each taking its
// Locker rounds times, and checks inside each critical section that the
// permits held, counted by the goroutines (atomic) and by Redis, are within
// size, and that Redis counts at least the goroutine's own n. It fails t
// unless every goroutine finishes within a deadline, and returns the most
// permits the goroutines held at once.
func hammerLockers(t *testing.T, c *dsync.Client, name string, size int64, lockers []sync.Locker, ns []int64, rounds int) int64 {
	t.Helper()
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for i, l := range lockers {
		n := ns[i]
		wg.Go(func() {
			defer func() {
				// After a failed deadline below, the test's Close ends
				// the Locks still waiting: not a second failure.
				if r := recover(); r != nil && r != dsync.ErrClosed {
					panic(r)
				}
			}()
			for range rounds {
				l.Lock()
				in := inside.Add(n)
				for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
				}
				assert.LessOrEqual(t, in, size, "permits held at once (atomic count)")
				held, err := semHeldInRedis(c, name)
				if assert.NoError(t, err, "Inspect inside the critical section") {
					assert.LessOrEqual(t, held, size, "permits held at once (Redis)")
					assert.GreaterOrEqual(t, held, n, "Redis does not count the %d permits of a Locker inside its critical section", n)
				}
				inside.Add(-n)
				l.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%d goroutines did not all finish %d rounds within 15 s", len(lockers), rounds)
	}
	return most.Load()
}

// Locker(1) of a size-3 semaphore, shared by 4 goroutines in each of 2
// Clients: each Lock takes a fresh owner (three Locks by one goroutine
// hold three permits as three owners, and a fourth waits), and the 8
// goroutines never hold more than 3 permits at once.
func TestSemaphoreLocker(t *testing.T) {
	c1 := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c1)))
	l1 := c1.NewSemaphore("pool", 3).Locker(1)
	l2 := c2.NewSemaphore("pool", 3).Locker(1)

	// One Locker, three Locks: three owners with a permit each, no
	// re-entry; the fourth Lock (through either Client) waits.
	for range 3 {
		l1.Lock()
	}
	st := inspectKind(t, c1, "pool", dsync.KindSemaphore)
	require.Len(t, st.Holders, 3, "three Locks of one Locker: %+v", st)
	owners := map[string]bool{}
	for _, h := range st.Holders {
		require.Equal(t, int64(1), h.Permits, "holder %+v", h)
		owners[h.Owner] = true
	}
	require.Len(t, owners, 3, "three Locks of one Locker share owners: %+v", st)
	require.Equal(t, int64(0), st.Free, "free permits: %+v", st)
	require.False(t, l1.(tryLocker).TryLock(), "TryLock with all 3 permits held")
	require.False(t, l2.(tryLocker).TryLock(), "TryLock through another Client with all 3 permits held")
	got := make(chan struct{})
	go func() { l2.Lock(); close(got) }()
	waitFor(t, 5*time.Second, "the fourth Lock to queue in Redis", func() bool {
		return len(inspectKind(t, c1, "pool", dsync.KindSemaphore).Waiters) == 1
	})
	select {
	case <-got:
		t.Fatal("a fourth Lock got a permit of a size-3 semaphore")
	default:
	}
	l1.Unlock()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Lock did not get the permit an Unlock freed")
	}
	l1.Unlock()
	l1.Unlock()
	l2.Unlock()
	require.Equal(t, int64(3), inspectKind(t, c1, "pool", dsync.KindSemaphore).Free, "free permits after every Unlock")

	// 8 goroutines, 4 per Client, sharing their Client's Locker.
	lockers := make([]sync.Locker, 8)
	ns := make([]int64, 8)
	for i := range lockers {
		lockers[i], ns[i] = l1, 1
		if i%2 == 1 {
			lockers[i] = l2
		}
	}
	most := hammerLockers(t, c1, "pool", 3, lockers, ns, 5)
	t.Logf("at most %d permits held at once", most)
	require.Equal(t, int64(3), inspectKind(t, c1, "pool", dsync.KindSemaphore).Free, "free permits after the goroutines")
}

// Locker(2) and Locker(1) on one size-3 semaphore, over 2 Clients: the
// permits held at once never exceed the size.
func TestSemaphoreLockerMixed(t *testing.T) {
	c1 := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c1)))
	s1, s2 := c1.NewSemaphore("mixed", 3), c2.NewSemaphore("mixed", 3)
	two, one := s1.Locker(2).(tryLocker), s2.Locker(1).(tryLocker)

	two.Lock()
	require.True(t, one.TryLock(), "Locker(1) with 1 of 3 permits free")
	require.False(t, one.TryLock(), "Locker(1) with all 3 permits held")
	one.Unlock()
	require.False(t, two.TryLock(), "Locker(2) with 1 of 3 permits free")
	two.Unlock()
	require.True(t, two.TryLock(), "Locker(2) with 3 of 3 permits free")
	two.Unlock()

	// 8 goroutines: Locker(2) and Locker(1) through each Client.
	ls := [][]sync.Locker{{s1.Locker(1), s1.Locker(2)}, {s2.Locker(1), s2.Locker(2)}}
	lockers := make([]sync.Locker, 8)
	ns := make([]int64, 8)
	for i := range lockers {
		k := (i / 2) % 2
		lockers[i], ns[i] = ls[i%2][k], int64(k+1)
	}
	most := hammerLockers(t, c1, "mixed", 3, lockers, ns, 5)
	t.Logf("at most %d permits held at once", most)
	require.Equal(t, int64(3), inspectKind(t, c1, "mixed", dsync.KindSemaphore).Free, "free permits after the goroutines")
}

// logCount is a slog.Handler counting the records with one message.
type logCount struct {
	msg string
	n   *atomic.Int64
}

func (h logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h logCount) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logCount) WithGroup(string) slog.Handler            { return h }
func (h logCount) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}

// A Lock waiting while its Redis goes down retries through the errors
// (logging them, never panicking) and returns once Redis is back (restarted
// empty, so the holder's permits are gone), with its permits held.
func TestSemaphoreLockerRedisRestart(t *testing.T) {
	s := redistest.Start(t)
	const lease = 900 * time.Millisecond // a waiter looks again every lease/3
	holder := newClientOn(t, s.Client(t), dsync.WithLease(lease), dsync.WithLogger(quietLog))
	var retries atomic.Int64
	log := slog.New(logCount{msg: "dsync: Lock retrying", n: &retries})
	waiter := newClientOn(t, s.Client(t), dsync.WithLease(lease), dsync.WithLogger(log))

	_, err := holder.NewSemaphore("r", 3).Acquire(ctxT(t), 2)
	require.NoError(t, err)
	l := waiter.NewSemaphore("r", 3).Locker(2)
	locked := make(chan any, 1) // nil, or what Lock panicked with
	go func() {
		defer func() { locked <- recover() }()
		l.Lock()
	}()
	waitFor(t, 5*time.Second, "Lock to queue in Redis", func() bool {
		st, ok := inspectOne(t, waiter, "r", dsync.KindSemaphore)
		return ok && len(st.Waiters) == 1
	})

	require.NoError(t, s.Signal(syscall.SIGKILL))
	waitFor(t, 10*time.Second, "the waiting Lock to meet a Redis error", func() bool {
		return retries.Load() > 0 || len(locked) > 0
	})
	select {
	case p := <-locked:
		t.Fatalf("Lock returned while Redis was down (panic: %v)", p)
	default:
	}
	require.NoError(t, s.Restart())
	select {
	case p := <-locked:
		require.Nil(t, p, "Lock panicked")
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return within 10 s of Redis coming back")
	}
	t.Logf("Lock retried %d times while Redis was down", retries.Load())

	st := inspectKind(t, waiter, "r", dsync.KindSemaphore)
	require.Len(t, st.Holders, 1, "holders after the restart: %+v", st)
	require.Equal(t, int64(2), st.Holders[0].Permits, "holders after the restart: %+v", st)
	require.Equal(t, int64(1), st.Free, "free permits after the restart: %+v", st)
	// A Client of its own, since the holder's may still meet a connection
	// the restart closed (EOF).
	other := newClientOn(t, s.Client(t), dsync.WithLogger(quietLog)).NewSemaphore("r", 3)
	_, ok, err := other.TryAcquire(ctxT(t), 2)
	require.NoError(t, err)
	require.False(t, ok, "2 more permits while the Lock holds 2 of 3")
	l.Unlock()
	lctx, ok, err := other.TryAcquire(ctxT(t), 3)
	require.NoError(t, err)
	require.True(t, ok, "all 3 permits after Unlock")
	require.NoError(t, other.Release(lctx, 3))
}

var quietLog = slog.New(slog.DiscardHandler)

// Misuse: Unlock without a Lock panics with the documented message naming
// the semaphore; an n outside 1..size gives a Locker whose Lock panics
// with ErrInvalidArgument and whose TryLock fails.
func TestSemaphoreLockerMisuse(t *testing.T) {
	c := newClient(t)
	s := c.NewSemaphore("slots", 3)
	want := `dsync: unlock of unlocked Semaphore "slots"`
	l := s.Locker(1)
	require.PanicsWithValue(t, want, l.Unlock, "Unlock of a Locker never locked")
	l.Lock()
	require.Equal(t, int64(2), inspectKind(t, c, "slots", dsync.KindSemaphore).Free, "free permits while locked")
	l.Unlock()
	require.PanicsWithValue(t, want, l.Unlock, "a second Unlock")
	require.Equal(t, int64(3), inspectKind(t, c, "slots", dsync.KindSemaphore).Free, "free permits after Unlock and a panicked one")

	for _, n := range []int64{0, -1, 4} {
		bad := s.Locker(n)
		err := panicErr(t, bad.Lock)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument, "Locker(%d).Lock", n)
		require.ErrorContains(t, err, fmt.Sprintf(`Locker(%d) of semaphore "slots"`, n))
		require.ErrorContains(t, err, "between 1 and the size, 3")
		require.False(t, bad.(tryLocker).TryLock(), "Locker(%d).TryLock", n)
		require.PanicsWithValue(t, want, bad.Unlock, "Locker(%d).Unlock", n)
	}
	err := panicErr(t, c.NewSemaphore("slots", 0).Locker(1).Lock)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument, "Lock of a size-0 semaphore")
	require.ErrorContains(t, err, "size 0", "Lock of a size-0 semaphore")

	c.Close()
	require.ErrorIs(t, panicErr(t, s.Locker(1).Lock), dsync.ErrClosed, "Lock after Close")
}

// panicErr runs f and returns the error it panicked with.
func panicErr(t *testing.T, f func()) (err error) {
	t.Helper()
	defer func() {
		r := recover()
		require.NotNil(t, r, "no panic")
		e, ok := r.(error)
		require.True(t, ok, "panicked with %T %v, not an error", r, r)
		err = e
	}()
	f()
	return nil
}
