package dsync_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// Close takes back everything a Client has in Redis (issue 24, "one way
// out"): these are the regression tests of its cases.

// queuedKind is a lock whose waiters queue in Redis, as the tests below
// take it through one Client.
type queuedKind struct {
	name   string
	lock   func(c *dsync.Client, ctx context.Context) (context.Context, error)
	unlock func(c *dsync.Client, lctx context.Context) error
}

func queuedKinds() []queuedKind {
	return []queuedKind{
		{"FairMutex",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewFairMutex("q").LockContext(ctx)
			},
			func(c *dsync.Client, l context.Context) error { return c.NewFairMutex("q").UnlockContext(l) }},
		{"RWMutex/write",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewRWMutex("q").LockContext(ctx)
			},
			func(c *dsync.Client, l context.Context) error { return c.NewRWMutex("q").UnlockContext(l) }},
		{"Semaphore",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewSemaphore("q", 1).Acquire(ctx, 1)
			},
			func(c *dsync.Client, l context.Context) error { return c.NewSemaphore("q", 1).Release(l, 1) }},
	}
}

// waiters returns how many waiters Inspect reports for name.
func waiters(t *testing.T, c *dsync.Client, name string) int {
	st, err := c.Inspect(context.Background(), name)
	require.NoError(t, err)
	n := 0
	for _, s := range st {
		n += len(s.Waiters)
	}
	return n
}

// H holds; A, on its own Client, queues; B queues behind A. A's Client is
// closed; when H releases, the release's grant goes to B: A's place left
// the queue at Close (before the fix B waited for A's grant to lapse, a
// full lease). The mechanism, not the scheduler: the lease is a minute,
// so B's fallback poll is 20 s away and a grant to A would hold a
// minute; B must have the lock within 10 s of the release, which only
// the release's grant (its message to B, or B's place at the head when
// B looks) can give.
func TestCloseWaiterLeavesQueue(t *testing.T) {
	const lease = time.Minute
	for _, k := range queuedKinds() {
		t.Run(k.name, func(t *testing.T) {
			prefix := testPrefix(t)
			opts := []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(lease)}
			h := newClientOn(t, newRueidis(t), opts...)
			a := newClientOn(t, newRueidis(t), opts...)
			b := newClientOn(t, newRueidis(t), opts...)
			ctx := ctxT(t)
			hl, err := k.lock(h, ctx)
			require.NoError(t, err)
			aErr := make(chan error, 1)
			go func() {
				_, err := k.lock(a, ctx)
				aErr <- err
			}()
			waitFor(t, 5*time.Second, "A to queue", func() bool { return waiters(t, h, "q") == 1 })
			bGot := make(chan error, 1)
			go func() {
				l, err := k.lock(b, ctx)
				bGot <- err
				if err == nil {
					_ = k.unlock(b, l)
				}
			}()
			waitFor(t, 5*time.Second, "B to queue", func() bool { return waiters(t, h, "q") == 2 })
			require.NoError(t, a.Close())
			require.ErrorIs(t, <-aErr, dsync.ErrClosed, "A's wait")
			require.Equal(t, 1, waiters(t, h, "q"), "A's place still queued after its Client's Close returned")
			require.NoError(t, k.unlock(h, hl))
			select {
			case err := <-bGot:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("B did not get the lock within 10 s of the release (lease %v: its fallback poll is %v away): the grant did not reach it", lease, lease/3)
			}
		})
	}
}

// An observer on another Client learns of a leader's Close at once: Close
// ends the term as Resign does (before the fix, by the record's expiry
// timer: 2.79 s at a 3 s lease).
func TestCloseLeaderObserved(t *testing.T) {
	const lease = 3 * time.Second
	prefix := testPrefix(t)
	opts := []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(lease)}
	a := newClientOn(t, newRueidis(t), opts...)
	b := newClientOn(t, newRueidis(t), opts...)
	ctx := ctxT(t)
	lctx, err := b.NewElection("e").Campaign(ctx, "b")
	require.NoError(t, err)
	obs := a.NewElection("e").Observe(ctx)
	select {
	case l := <-obs:
		require.Equal(t, "b", l.Value)
	case <-time.After(5 * time.Second):
		t.Fatal("the observer did not see the leader")
	}
	start := time.Now()
	require.NoError(t, b.Close())
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrClosed)
	select {
	case l := <-obs:
		d := time.Since(start)
		t.Logf("Observe delivered %+v %v after Close began", l, d)
		require.Equal(t, dsync.Leader{}, l, "the change after the leader's Close")
		require.LessOrEqual(t, d, 100*time.Millisecond, "Observe after the leader's Close")
	case <-time.After(2 * lease):
		t.Fatal("the observer never saw the term end")
	}
	_, err = a.NewElection("e").Leader(ctx)
	require.ErrorIs(t, err, dsync.ErrNoLeader)
}

// tagFields returns every field of every tag hash under prefix.
func tagFields(t *testing.T, rc rueidis.Client, prefix string) map[string]string {
	ctx := context.Background()
	keys, err := rc.Do(ctx, rc.B().Keys().Pattern(prefix+":*:tags").Build()).AsStrSlice()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		m, err := rc.Do(ctx, rc.B().Hgetall().Key(k).Build()).AsStrMap()
		require.NoError(t, err)
		for f, v := range m {
			out[k+" "+f] = v
		}
	}
	return out
}

func tagObserver(tag string) dsync.Observer {
	return dsync.Observer{HoldTag: func(context.Context, dsync.AcquireDone) string { return tag }}
}

// 30 holders with a HoldTag, each closed while holding, leave no tag
// (before the fix: 30 fields with a TTL of an hour that every tagged
// acquisition pushed back).
func TestCloseRemovesHoldTags(t *testing.T) {
	for _, kind := range []string{"Mutex", "FairMutex", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			prefix := testPrefix(t)
			rc := newRueidis(t)
			ctx := ctxT(t)
			for i := range 30 {
				c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithObserver(tagObserver("holder")))
				var err error
				switch kind {
				case "Mutex":
					_, err = c.NewMutex("tagged").LockContext(ctx)
				case "FairMutex":
					_, err = c.NewFairMutex("tagged").LockContext(ctx)
				case "Semaphore":
					_, err = c.NewSemaphore("tagged", 30).Acquire(ctx, 1)
				}
				require.NoError(t, err, "holder %d", i)
				// Tags reach Redis in the background, a millisecond on.
				waitFor(t, 5*time.Second, "the holder's tag in Redis", func() bool { return len(tagFields(t, rc, prefix)) > 0 })
				require.Len(t, tagFields(t, rc, prefix), 1, "tags with holder %d (its own only)", i)
				require.NoError(t, c.Close())
			}
			require.Empty(t, tagFields(t, rc, prefix), "tags left by holders closed while holding")
		})
	}
}

// A holder that dies without releasing (its connection cut: neither the
// release nor the untag reaches Redis) leaves its tag for at most one lease
// after its hold's end, although another holder of the same lock keeps
// writing its own tag (before the fix it stayed an hour, pushed back by
// every tagged acquisition).
func TestCrashedHolderTagExpires(t *testing.T) {
	const lease = time.Second
	prefix := testPrefix(t)
	rc := newRueidis(t)
	ctx := ctxT(t)
	opts := func(tag string) []dsync.Option {
		return []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(lease), dsync.WithObserver(tagObserver(tag))}
	}
	live := newClientOn(t, newRueidis(t), opts("live")...)
	_, err := live.NewSemaphore("s", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	crc := newRueidis(t)
	crashed := newClientOn(t, crc, opts("crashed")...)
	_, err = crashed.NewSemaphore("s", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	// Tags reach Redis in the background, a millisecond on.
	waitFor(t, 5*time.Second, "both holders' tags in Redis", func() bool { return len(tagFields(t, rc, prefix)) >= 2 })
	require.Len(t, tagFields(t, rc, prefix), 2)
	crc.Close() // the crash: nothing of this Client reaches Redis any more
	crashedAt := time.Now()
	crashed.Close()
	// Later tagged holds keep writing the hash: a third Client takes and
	// releases the free permit every 100 ms.
	other := newClientOn(t, newRueidis(t), opts("other")...)
	gone := func() bool {
		for _, v := range tagFields(t, rc, prefix) {
			if v == "crashed" || strings.HasSuffix(v, " crashed") {
				return false
			}
		}
		return true
	}
	for !gone() {
		// The hold ends at most a lease after the crash (its last
		// renewal came before it); its tag at most a lease after that.
		require.Less(t, time.Since(crashedAt), 2*lease+100*time.Millisecond, "the crashed holder's tag outlived its hold by more than a lease")
		l, ok, err := other.NewSemaphore("s", 2).TryAcquire(ctx, 1)
		require.NoError(t, err)
		if ok {
			require.NoError(t, other.NewSemaphore("s", 2).Release(l, 1))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the crashed holder's tag was gone %v after the crash (lease %v)", time.Since(crashedAt), lease)
	fields := tagFields(t, rc, prefix)
	require.Len(t, fields, 1, "the live holder's tag: %v", fields)
}

// A Client that holds and waits for every primitive at once leaves nothing
// in Redis once its Close has returned: no queue place (FairMutex, RWMutex
// readers and writers, Semaphore, Election candidates, Cond and Group
// waiters), no Mutex waiting registration, no hold (its own or handed on
// between its goroutines), no tag. (Before the fix the places, the
// waiting registration and the Group waiter were left.)
func TestCloseLeavesNothing(t *testing.T) {
	prefix := testPrefix(t)
	opts := []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(6 * time.Second)}
	h := newClientOn(t, newRueidis(t), opts...)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server(t).Addr}, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	a, err := dsync.NewClient(rc, append(opts, dsync.WithClientName("closing"), dsync.WithObserver(tagObserver("a")))...)
	require.NoError(t, err)
	defer a.Close()
	cl := &rollClient{c: a, rc: rc, name: "closing", id: dsync.ClientID(a)}
	r := &rolling{t: t, prefix: prefix, rc: newRueidis(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	block := make(chan struct{}) // the runs of H's f block until the test ends
	defer close(block)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	bg := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f()
		}()
	}
	hold := func(l context.Context, err error) {
		require.NoError(t, err)
		_ = l
	}
	// Held by A: a Mutex with two goroutines of A queued behind it, a
	// FairMutex, a Semaphore permit, an Election term.
	hold(a.NewMutex("m1").LockContext(ctx))
	for range 2 {
		bg(func() error { _, err := a.NewMutex("m1").LockContext(ctx); return err })
	}
	hold(a.NewFairMutex("f1").LockContext(ctx))
	hold(a.NewSemaphore("s1", 1).Acquire(ctx, 1))
	hold(a.NewElection("e1").Campaign(ctx, "a"))
	// Held by H, waited for by A.
	hold(h.NewMutex("m2").LockContext(ctx))
	for range 2 {
		bg(func() error { _, err := a.NewMutex("m2").LockContext(ctx); return err })
	}
	hold(h.NewFairMutex("f2").LockContext(ctx))
	bg(func() error { _, err := a.NewFairMutex("f2").LockContext(ctx); return err })
	hold(h.NewRWMutex("rw").LockContext(ctx))
	bg(func() error { _, err := a.NewRWMutex("rw").LockContext(ctx); return err })
	bg(func() error { _, err := a.NewRWMutex("rw").RLockContext(ctx); return err })
	hold(h.NewSemaphore("s2", 1).Acquire(ctx, 1))
	bg(func() error { _, err := a.NewSemaphore("s2", 1).Acquire(ctx, 1); return err })
	hold(h.NewElection("e2").Campaign(ctx, "h"))
	bg(func() error { _, err := a.NewElection("e2").Campaign(ctx, "a"); return err })
	bg(func() error {
		m := a.NewMutex("cm")
		l, err := m.LockContext(ctx)
		if err != nil {
			return err
		}
		_, err = a.NewCond(m).Wait(l)
		return err
	})
	running := make(chan struct{}, 2)
	go func() {
		_, _, _ = dsync.NewGroup[int](h, "g").Do(ctx, "k", func(context.Context) (int, error) { running <- struct{}{}; <-block; return 0, nil })
	}()
	go func() {
		_ = h.NewOnce("o").Do(ctx, func(context.Context) error { running <- struct{}{}; <-block; return nil })
	}()
	<-running
	<-running
	bg(func() error {
		_, _, err := dsync.NewGroup[int](a, "g").Do(ctx, "k", func(context.Context) (int, error) { return 0, nil })
		return err
	})
	bg(func() error { return a.NewOnce("o").Do(ctx, func(context.Context) error { return nil }) })
	// Every wait of A is in Redis.
	want := []string{"{m1}:mutex", "{m1}:mutex:tags", "{f1}:fair", "{s1}:sem:holders", "{\x00election:e1}:fair",
		"{m2}:mutex:waiting", "{f2}:fair:queue", "{rw}:rw:queue", "{rw}:rw:rwait", "{s2}:sem:waiters",
		"{\x00election:e2}:fair:queue", "{cm}:cond", "{g}:group:w:k"}
	waitFor(t, 5*time.Second, "every wait of A in Redis", func() bool {
		left := strings.Join(r.leftBy(cl), "\n")
		for _, k := range want {
			if !strings.Contains(left, prefix+":"+k+`"`) && !strings.Contains(left, fmt.Sprintf("%q", prefix+":"+k)) {
				return false
			}
		}
		return true
	})
	require.NoError(t, a.Close())
	left := r.leftBy(cl)
	require.Empty(t, left, "what the Client had in Redis after its Close returned")
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, dsync.ErrClosed, "a wait Close ended")
	}
}

// TestCloseDuringRunBegin: a Client closed while a Once's or Group's Do
// is starting a run (its begin on its way, or its reply just in) leaves no
// running marker behind once Close returned: the run is ended before Close
// returns, so a caller of another Client runs f at once instead of after
// the marker's lease. (The rolling restart's Group subtest found such a
// run, taken over 2.9 s and 4.3 s late at a 6 s lease.) The Close comes a
// random 0-1 ms after the Do starts, around the begin's round trip.
func TestCloseDuringRunBegin(t *testing.T) {
	for _, kind := range []string{"Once", "Group"} {
		t.Run(kind, func(t *testing.T) {
			prefix := testPrefix(t)
			r := &rolling{t: t, prefix: prefix, rc: newRueidis(t)}
			opts := []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(6 * time.Second)}
			var left []string
			const tries = 150
			for i := range tries {
				rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server(t).Addr}, DisableCache: true})
				require.NoError(t, err)
				name := fmt.Sprintf("c%d", i)
				a, err := dsync.NewClient(rc, append(opts, dsync.WithClientName(name))...)
				require.NoError(t, err)
				done := make(chan error, 1)
				f := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
				go func() {
					key := fmt.Sprint(i)
					if kind == "Once" {
						done <- a.NewOnce(key).Do(context.Background(), f)
						return
					}
					_, _, err := dsync.NewGroup[int](a, "g").Do(context.Background(), key, func(ctx context.Context) (int, error) { return 0, f(ctx) })
					done <- err
				}()
				spin(time.Duration(i%10) * 100 * time.Microsecond)
				require.NoError(t, a.Close())
				cl := &rollClient{c: a, rc: rc, name: name, id: dsync.ClientID(a)}
				left = append(left, r.leftBy(cl)...)
				rc.Close()
				require.ErrorIs(t, <-done, dsync.ErrClosed)
			}
			require.Empty(t, left, "running markers of closed Clients, %d tries", tries)
		})
	}
}

// spin waits d without a timer, so that a few hundred µs are a few
// hundred µs.
func spin(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}

// TestCloseAfterLostWaitReply: a wait whose attempt reached Redis while
// its reply was lost (the caller's deadline came first: Redis was slow)
// leaves nothing of its Client once that Client's Close returned. The
// attempt may have registered the wait (a Mutex's waiting count, a queue
// place) though its caller never saw the reply; the undo of the attempt,
// sent after it, must take that back too. (The fault suite's deploys found
// a Mutex waiting entry of a closed Client in Redis after its Close
// returned: the undo released only an acquisition, never the entry.)
func TestCloseAfterLostWaitReply(t *testing.T) {
	kinds := append([]queuedKind{
		{"Mutex",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewMutex("q").LockContext(ctx)
			},
			func(c *dsync.Client, l context.Context) error { return c.NewMutex("q").UnlockContext(l) }},
		{"Mutex/owner",
			func(c *dsync.Client, ctx context.Context) (context.Context, error) {
				return c.NewMutex("q").LockContext(dsync.WithOwner(ctx))
			},
			func(c *dsync.Client, l context.Context) error { return c.NewMutex("q").UnlockContext(l) }},
	}, queuedKinds()...)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := redistest.Start(t) // private: CLIENT PAUSE stalls every client of it
			prefix := testPrefix(t)
			opts := []dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithLease(6 * time.Second)}
			h := newClientOn(t, s.Client(t), opts...)
			rc := s.Client(t)
			a, err := dsync.NewClient(rc, append(opts, dsync.WithClientName("closing"))...)
			require.NoError(t, err)
			defer a.Close()
			cl := &rollClient{c: a, rc: rc, name: "closing", id: dsync.ClientID(a)}
			r := &rolling{t: t, prefix: prefix, rc: s.Client(t)}
			hctx, err := k.lock(h, ctxT(t))
			require.NoError(t, err)
			// Redis takes no write for 300 ms: A's attempt waits there, and
			// runs after A's caller has given up.
			require.NoError(t, s.Do(t, "CLIENT", "PAUSE", "300", "WRITE").Error())
			ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
			_, err = k.lock(a, ctx)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "A's wait")
			require.NoError(t, a.Close())
			require.Empty(t, r.leftBy(cl), "what A had in Redis after its Close returned")
			require.NoError(t, k.unlock(h, hctx))
		})
	}
}

// TestCloseDuringHoldTag: a Client closed while a new hold's tag is being
// written (its observer's HoldTag has just returned; Close begins there)
// leaves no tag once its Close returned. A Once's or Group's run is tagged
// when its wait ends, before its hold is claimed (runRecord.claim); a
// claim that found the Client closed ended the run in Redis but not the
// hold, so its tag stayed a lease. (The fault suite's deploys found a Once
// run's tag of a closed Client after its Close returned.)
func TestCloseDuringHoldTag(t *testing.T) {
	const rounds = 40
	prefix := testPrefix(t)
	rc := newRueidis(t)
	ctx := ctxT(t)
	for _, kind := range []string{"Mutex", "Once"} {
		t.Run(kind, func(t *testing.T) {
			for i := range rounds {
				var c *dsync.Client
				closed := make(chan error, 1)
				obs := dsync.Observer{HoldTag: func(context.Context, dsync.AcquireDone) string {
					go func() { closed <- c.Close() }() // Close races the tag's write
					return "tag"
				}}
				var err error
				c, err = dsync.NewClient(newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs))
				require.NoError(t, err)
				name := fmt.Sprintf("%s%d", kind, i)
				switch kind {
				case "Mutex":
					_, _ = c.NewMutex(name).LockContext(ctx)
				case "Once":
					_ = c.NewOnce(name).Do(ctx, func(fctx context.Context) error { <-fctx.Done(); return nil })
				}
				require.NoError(t, <-closed)
				require.Empty(t, tagFields(t, rc, prefix), "round %d: tags left after Close returned", i)
			}
		})
	}
}
