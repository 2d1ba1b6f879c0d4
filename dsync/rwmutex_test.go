package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

func init() {
	childRoles["rwreader"] = childRWReader
}

// rwKeys returns the hash, readers, queue and places keys of rw mutex name.
func rwKeys(prefix, name string) []string {
	k := prefix + ":{" + name + "}:rw"
	return []string{k, k + ":readers", k + ":queue", k + ":places", k + ":rwait", k + ":radmit"}
}

func hgetall(t testing.TB, rc rueidis.Client, key string) map[string]string {
	t.Helper()
	m, err := rc.Do(context.Background(), rc.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRWMutexBasic(t *testing.T) {
	c := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c)))
	rw, rw2 := c.NewRWMutex("basic"), c2.NewRWMutex("basic")
	ctx := ctxT(t)
	r1 := dsync.WithOwner(ctx)
	// Readers share, across Clients, and re-enter.
	l1, err := rw.RLockContext(r1)
	if err != nil {
		t.Fatal(err)
	}
	l1b, err := rw2.RLockContext(r1)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := tokenOf(t, l1), tokenOf(t, l1b); a != b {
		t.Fatalf("read re-entry changed the token %d -> %d", a, b)
	}
	l2, ok, err := rw2.TryRLockContext(ctx)
	if err != nil || !ok {
		t.Fatalf("second reader: %v %v", ok, err)
	}
	if _, ok, err := rw.TryLockContext(ctx); ok || err != nil {
		t.Fatalf("writer got in among readers: %v %v", ok, err)
	}
	if err := rw.RUnlockContext(dsync.WithOwner(ctx)); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("foreign RUnlock = %v, want ErrNotHeld", err)
	}
	if err := rw.UnlockContext(r1); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("Unlock by a reader = %v, want ErrNotHeld", err)
	}
	for _, u := range []struct {
		m *dsync.RWMutex
		l context.Context
	}{{rw2, l1b}, {rw, l1}, {rw2, l2}} {
		if err := u.m.RUnlockContext(u.l); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.RUnlockContext(l1); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("extra RUnlock = %v, want ErrNotHeld", err)
	}
	// A writer excludes all, and re-enters.
	w := dsync.WithOwner(ctx)
	lw, err := rw.LockContext(w)
	if err != nil {
		t.Fatal(err)
	}
	lw2, err := rw2.LockContext(w)
	if err != nil {
		t.Fatal(err)
	}
	if tokenOf(t, lw) <= tokenOf(t, l2) {
		t.Fatal("write token not above the read tokens")
	}
	if _, ok, _ := rw2.TryRLockContext(ctx); ok {
		t.Fatal("reader got in with a writer")
	}
	if _, ok, _ := rw2.TryLockContext(ctx); ok {
		t.Fatal("second writer got in")
	}
	if err := rw.UnlockContext(dsync.WithOwner(ctx)); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("foreign Unlock = %v", err)
	}
	if err := rw2.UnlockContext(lw2); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := rw2.TryRLockContext(ctx); ok {
		t.Fatal("reader got in after 1 of 2 write releases")
	}
	if err := rw.UnlockContext(lw); err != nil {
		t.Fatal(err)
	}
	if lw.Err() == nil {
		t.Fatal("write lock context not cancelled by release")
	}
	// sync.Locker forms.
	rw.Lock()
	if rw.TryRLock() || rw.TryLock() {
		t.Fatal("Try succeeded against Lock")
	}
	rw.Unlock()
	var rl sync.Locker = rw.RLocker()
	rl.Lock()
	rw.RLock()
	if rw.TryLock() {
		t.Fatal("TryLock succeeded against RLock")
	}
	rl.Unlock()
	rw.RUnlock()
	if !rw.TryLock() {
		t.Fatal("TryLock failed on a free RWMutex")
	}
	rw.Unlock()
	for _, f := range []func(){rw.Unlock, rw.RUnlock} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("unlock of an unlocked RWMutex did not panic")
				}
			}()
			f()
		}()
	}
}

func tokenOf(t testing.TB, ctx context.Context) uint64 {
	t.Helper()
	tok, ok := dsync.FencingToken(ctx)
	if !ok {
		t.Fatal("no fencing token")
	}
	return tok
}

func TestRWMutexDowngrade(t *testing.T) {
	c := newClient(t)
	rw := c.NewRWMutex("down")
	ctx := dsync.WithOwner(ctxT(t))
	lw, err := rw.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := rw.RLockContext(ctx) // the writer takes the read lock
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := rw.TryRLockContext(ctxT(t)); ok {
		t.Fatal("another reader got in while write-locked")
	}
	if err := rw.UnlockContext(lw); err != nil {
		t.Fatal(err)
	}
	if lr.Err() != nil {
		t.Fatal("read hold ended with the write hold")
	}
	// Now only reading: other readers share, writers wait.
	l2, ok, err := rw.TryRLockContext(ctxT(t))
	if err != nil || !ok {
		t.Fatalf("reader after downgrade: %v %v", ok, err)
	}
	if _, ok, _ := rw.TryLockContext(ctxT(t)); ok {
		t.Fatal("writer got in while downgraded owner reads")
	}
	rw.RUnlockContext(l2)
	if err := rw.RUnlockContext(lr); err != nil {
		t.Fatal(err)
	}
	if !rw.TryLock() {
		t.Fatal("not free after the downgraded read ended")
	}
	rw.Unlock()
}

// Writers exclude everyone and readers share, across two Clients.
func TestRWMutexHammerClients(t *testing.T) {
	prefix := testPrefix(t)
	rcv := newRueidis(t)
	const writers, readers, iters = 3, 4, 25
	var writing, reading, maxReading atomic.Int32
	var writes atomic.Int64
	var wg sync.WaitGroup
	for ci := 0; ci < 2; ci++ {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
		rw := c.NewRWMutex("hammer")
		for g := 0; g < writers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters; i++ {
					l, err := rw.LockContext(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					if n := writing.Add(1); n != 1 || reading.Load() != 0 {
						t.Errorf("writer inside with %d writers, %d readers", n, reading.Load())
					}
					unguardedIncr(t, rcv, prefix+":counter")
					writes.Add(1)
					writing.Add(-1)
					if err := rw.UnlockContext(l); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for g := 0; g < readers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters; i++ {
					l, err := rw.RLockContext(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					n := reading.Add(1)
					for m := maxReading.Load(); n > m && !maxReading.CompareAndSwap(m, n); m = maxReading.Load() {
					}
					if writing.Load() != 0 {
						t.Error("reader inside with a writer")
					}
					time.Sleep(2 * time.Millisecond) // overlap with other readers
					reading.Add(-1)
					if err := rw.RUnlockContext(l); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	got, err := rcv.Do(context.Background(), rcv.B().Get().Key(prefix+":counter").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if want := writes.Load(); got != want || want != 2*writers*iters {
		t.Fatalf("counter = %d after %d writes: updates lost", got, want)
	}
	t.Logf("max concurrent readers: %d", maxReading.Load())
	if maxReading.Load() < 2 {
		t.Fatal("readers never shared the lock")
	}
}

// A writer is not starved by readers that keep the lock read-held at every
// moment: once it waits, new readers wait behind it.
func TestRWMutexWriterNotStarved(t *testing.T) {
	prefix := testPrefix(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var rws []*dsync.RWMutex
	for ci := 0; ci < 2; ci++ {
		c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
		rw := c.NewRWMutex("stream")
		rws = append(rws, rw)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := rw.RLockContext(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					reads.Add(1)
					time.Sleep(20 * time.Millisecond)
					rw.RUnlockContext(l)
				}
			}()
		}
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 5*time.Second, "the reader stream", func() bool { return reads.Load() > 20 })
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	start := time.Now()
	l, err := rws[0].LockContext(ctx)
	wait := time.Since(start)
	if err != nil {
		t.Fatalf("writer starved by readers: %v after %v", err, wait)
	}
	t.Logf("writer waited %v under a stream of 6 readers (20ms each)", wait)
	rws[0].UnlockContext(l)
	if wait > time.Second {
		t.Fatalf("writer waited %v", wait)
	}
}

// childRWReader: take a read lock on rw mutex DSYNC_TEST_NAME, print
// "held", and hold it until killed.
func childRWReader(c *dsync.Client, rc rueidis.Client, prefix string) int {
	rw := c.NewRWMutex(os.Getenv("DSYNC_TEST_NAME"))
	if _, err := rw.RLockContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	select {}
}

// A crashed reader's hold lapses within one lease while a live reader keeps
// renewing its own (no zombie renewal), and a writer then gets in.
func TestRWMutexReaderCrash(t *testing.T) {
	const name, lease = "crash", time.Second
	prefix := testPrefix(t)
	rc := newRueidis(t)
	keys := rwKeys(prefix, name)
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	rw := c.NewRWMutex(name)
	live, err := rw.RLockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := childSaying(t, "held", "rwreader", prefix, "DSYNC_TEST_NAME="+name, "DSYNC_TEST_LEASE="+lease.String())
	if n := zcard(t, rc, keys[1]); n != 2 {
		t.Fatalf("%d readers, want 2", n)
	}
	// Sleep is the point: both readers' holds outlive their first lease.
	time.Sleep(lease + lease/2)
	if n := zcard(t, rc, keys[1]); n != 2 {
		t.Fatalf("a live reader's hold lapsed: %d readers", n)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// A writer queues; the live reader releases after the crash; the writer
	// gets in once the dead reader's lease lapses.
	got := make(chan time.Duration, 1)
	go func() {
		l, err := rw.LockContext(ctxT(t))
		if err != nil {
			t.Error(err)
			got <- -1
			return
		}
		got <- time.Since(killed)
		rw.UnlockContext(l)
	}()
	waitFor(t, 2*time.Second, "the writer to queue", func() bool { return len(lrange(t, rc, keys[2])) == 1 })
	if err := rw.RUnlockContext(live); err != nil {
		t.Fatal(err)
	}
	var wait time.Duration
	select {
	case wait = <-got:
	case <-time.After(5 * lease):
		t.Fatal("a dead reader kept the lock")
	}
	t.Logf("writer got the lock %v after the reader was killed (lease %v)", wait, lease)
	if wait < 0 || wait > lease+lease/2 {
		t.Fatalf("dead reader held the lock for %v, over one lease (%v) plus slack", wait, lease)
	}
}

// A writer whose wait ends leaves the queue at once, so readers are no
// longer held back by it, and nothing is left behind.
func TestRWMutexCancelledWriterLeaves(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	keys := rwKeys(prefixOf(t, c), "cancel")
	rw := c.NewRWMutex("cancel")
	l, err := rw.RLockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	before := hgetall(t, rc, keys[0])
	short, cancel := context.WithTimeout(ctxT(t), 150*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := rw.LockContext(short)
		errc <- err
	}()
	waitFor(t, 2*time.Second, "the writer to queue", func() bool { return len(lrange(t, rc, keys[2])) == 1 })
	if _, ok, _ := rw.TryRLockContext(ctxT(t)); ok {
		t.Fatal("a new reader overtook a waiting writer")
	}
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait ended by its deadline returned %v", err)
	}
	if q := lrange(t, rc, keys[2]); len(q) != 0 || zcard(t, rc, keys[3]) != 0 {
		t.Fatalf("queue after a cancelled writer: %q", q)
	}
	if after := hgetall(t, rc, keys[0]); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("hash changed by a cancelled writer: %v -> %v", before, after)
	}
	l2, ok, err := rw.TryRLockContext(ctxT(t))
	if err != nil || !ok {
		t.Fatalf("reader still held back after the writer left: %v %v", ok, err)
	}
	rw.RUnlockContext(l2)
	rw.RUnlockContext(l)
}

// The scripts, called directly, with the Redis state checked after each.
func TestRWMutexScripts(t *testing.T) {
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := rwKeys(testPrefix(t), "s")
	rch, wch := keys[0]+":r", keys[0]+":w:"
	acquire := func(mode, owner, lease string, try bool) []int64 {
		t.Helper()
		tr := "0"
		if try {
			tr = "1"
		}
		v, err := scripts.RWAcquire.Exec(ctx, rc, keys, []string{mode, owner, lease, "10000", tr, wch}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release := func(mode, owner string, tok int64) int64 {
		t.Helper()
		n, err := scripts.RWRelease.Exec(ctx, rc, keys, []string{mode, owner, strconv.FormatInt(tok, 10), rch, wch}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	renew := func(mode, owner string, tok int64, lease string) int64 {
		t.Helper()
		n, err := scripts.RWRenew.Exec(ctx, rc, keys, []string{mode, owner, strconv.FormatInt(tok, 10), lease}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	dc, cancel := rc.Dedicate()
	defer cancel()
	msgs := make(chan string, 16)
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m.Channel }})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(rch, wch+"w1", wch+"w2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	defer func() { dc.Close(); <-wait }()

	a := acquire("read", "a", "10000", false)
	b := acquire("read", "b", "300", false) // b will die: short lease
	if a[0] != 1 || b[0] != 1 || b[1] <= a[1] {
		t.Fatalf("readers: %v %v", a, b)
	}
	h := hgetall(t, rc, keys[0])
	if h["mode"] != "read" || h["r:a"] != "1 "+strconv.FormatInt(a[1], 10) || h["tok"] != strconv.FormatInt(b[1], 10) {
		t.Fatalf("hash %v", h)
	}
	if v := acquire("read", "a", "10000", false); v[0] != 2 || hgetall(t, rc, keys[0])["r:a"] != "2 "+strconv.FormatInt(a[1], 10) {
		t.Fatalf("read re-entry %v", v)
	}
	// w1 queues behind the readers; new reader c now waits behind w1.
	if v := acquire("write", "w1", "10000", false); v[0] != 0 || v[1] <= 0 || v[1] > 300 {
		t.Fatalf("writer among readers = %v, want {0, <= b's lease}", v)
	}
	if v := acquire("read", "c", "10000", false); v[0] != 0 {
		t.Fatalf("reader overtook a queued writer: %v", v)
	}
	// a renews only itself; b's hold lapses on its own.
	waitFor(t, 3*time.Second, "b's hold to lapse", func() bool {
		if renew("read", "a", a[1], "10000") != 1 {
			t.Fatal("a's renewal failed")
		}
		return zcard(t, rc, keys[1]) == 1
	})
	if _, ok := hgetall(t, rc, keys[0])["r:b"]; ok {
		t.Fatal("lapsed reader b left in the hash")
	}
	if renew("read", "b", b[1], "10000") != 0 {
		t.Fatal("a lapsed hold was renewed")
	}
	if release("read", "x", 0) != 0 || release("write", "a", 0) != 0 {
		t.Fatal("foreign release succeeded")
	}
	if release("read", "a", a[1]) != 2 {
		t.Fatal("first of a's two releases")
	}
	if release("read", "a", a[1]) != 1 {
		t.Fatal("a's last release")
	}
	if ch := <-msgs; ch != wch+"w1" {
		t.Fatalf("last read release woke %q, want the head writer w1", ch)
	}
	if _, ok := hgetall(t, rc, keys[0])["mode"]; ok {
		t.Fatal("mode set on a free lock")
	}
	w1 := acquire("write", "w1", "10000", false)
	if w1[0] != 1 || w1[1] <= b[1] {
		t.Fatalf("w1 = %v", w1)
	}
	h = hgetall(t, rc, keys[0])
	if h["mode"] != "write" || h["w"] != "w1" || h["wc"] != "1" || len(lrange(t, rc, keys[2])) != 0 {
		t.Fatalf("hash %v after w1 acquired", h)
	}
	acquire("write", "w2", "10000", false)
	// Downgrade: w1 takes the read lock, then drops the write lock.
	if v := acquire("read", "w1", "10000", false); v[0] != 1 {
		t.Fatalf("writer's read = %v", v)
	}
	if renew("write", "w1", w1[1], "10000") != 1 || renew("write", "w2", w1[1], "10000") != 0 {
		t.Fatal("write renewal")
	}
	if release("write", "w1", w1[1]) != 1 {
		t.Fatal("w1's write release")
	}
	if ch := <-msgs; ch != rch {
		t.Fatalf("write release woke %q, want the readers", ch)
	}
	// c, which waited for w1, is admitted ahead of the queued w2.
	if z := zcard(t, rc, keys[5]); z != 1 {
		t.Fatalf("%d admitted readers after the write release, want 1 (c)", z)
	}
	if h := hgetall(t, rc, keys[0]); h["mode"] != "read" || h["w"] != "" {
		t.Fatalf("after downgrade: %v", h)
	}
	if v := acquire("write", "w2", "10000", true); v[0] != 0 {
		t.Fatal("writer got in past a downgraded reader")
	}
	// w2 leaves: the queue is empty, so readers are told.
	if n, err := scripts.RWLeave.Exec(ctx, rc, keys, []string{"write", "w2", wch, rch}).AsInt64(); err != nil || n != 1 {
		t.Fatalf("leave = %d %v", n, err)
	}
	if ch := <-msgs; ch != rch {
		t.Fatalf("leave of the last writer woke %q, want the readers", ch)
	}
	if v := acquire("read", "c", "10000", false); v[0] != 1 {
		t.Fatalf("reader c after the writer left: %v", v)
	}
}

// Events carry the kind and mode; a fixed lease (WithLeaseTime) expires the
// hold and cancels its lock context with ErrLockLost.
func TestRWMutexEventsAndLeaseTime(t *testing.T) {
	var mu sync.Mutex
	var got []string
	rec := func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}
	c := newClient(t, dsync.WithObserver(dsync.Observer{
		AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
			rec(fmt.Sprintf("acquired %s %s %v", e.Kind, e.Mode, e.Acquired))
		},
		Released: func(_ context.Context, e dsync.Released) { rec(fmt.Sprintf("released %s %s", e.Kind, e.Mode)) },
		Lost:     func(e dsync.Lost) { rec(fmt.Sprintf("lost %s %s", e.Kind, e.Mode)) },
	}))
	rw := c.NewRWMutex("ev")
	l, err := rw.RLockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rw.RUnlockContext(l)
	f := c.NewFairMutex("ev", dsync.WithLeaseTime(100*time.Millisecond))
	lf, err := f.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	short := c.NewRWMutex("ev2", dsync.WithLeaseTime(100*time.Millisecond))
	lw, err := short.LockContext(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []context.Context{lf, lw} {
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("fixed lease did not expire")
		}
		if !errors.Is(context.Cause(l), dsync.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", context.Cause(l))
		}
	}
	// Expired in Redis too (the local clock ends a hold a little early, by
	// the drift allowance): others get in.
	waitFor(t, time.Second, "the fair mutex to expire", func() bool {
		_, ok, err := c.NewFairMutex("ev").TryLockContext(ctxT(t))
		return ok && err == nil
	})
	waitFor(t, time.Second, "the rw mutex to expire", func() bool {
		_, ok, err := c.NewRWMutex("ev2").TryRLockContext(ctxT(t))
		return ok && err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"acquired rw_mutex read true", "released rw_mutex read",
		"acquired fair_mutex  true", "acquired rw_mutex write true",
	}
	if len(got) < 6 || fmt.Sprint(got[:4]) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q then two losses", got, want)
	}
	if lost := fmt.Sprint(got[4:6]); lost != "[lost fair_mutex  lost rw_mutex write]" && lost != "[lost rw_mutex write lost fair_mutex ]" {
		t.Fatalf("loss events %q", got[4:])
	}
}
