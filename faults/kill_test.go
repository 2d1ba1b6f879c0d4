package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["pholder"] = childPHolder
}

// childPHolder takes FAULTS_KIND on FAULTS_NAME — "read" or "write" (an
// RWMutex), "sem" (FAULTS_N permits of a Semaphore of FAULTS_SIZE) or
// "once" (a Once run whose f never returns) — says "held <token>" and
// keeps it until it is killed.
func childPHolder(c *dsync.Client, _ remote) int {
	name := os.Getenv("FAULTS_NAME")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lctx context.Context
	var err error
	switch kind := os.Getenv("FAULTS_KIND"); kind {
	case "read":
		lctx, err = c.NewRWMutex(name).RLockContext(ctx)
	case "write":
		lctx, err = c.NewRWMutex(name).LockContext(ctx)
	case "sem":
		n, _ := strconv.ParseInt(os.Getenv("FAULTS_N"), 10, 64)
		size, _ := strconv.ParseInt(os.Getenv("FAULTS_SIZE"), 10, 64)
		lctx, err = c.NewSemaphore(name, size).Acquire(ctx, n)
	case "once":
		err = c.NewOnce(name).Do(ctx, func(fctx context.Context) error {
			tok, _ := dsync.FencingToken(fctx)
			say("held", strconv.FormatUint(tok, 10))
			<-fctx.Done()
			return fctx.Err()
		})
		fmt.Fprintln(os.Stderr, "pholder: Once.Do returned", err)
		return 1
	default:
		fmt.Fprintln(os.Stderr, "pholder: unknown kind", kind)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pholder:", err)
		return 1
	}
	tok, _ := dsync.FencingToken(lctx)
	say("held", strconv.FormatUint(tok, 10))
	<-ctx.Done() // held until killed
	return 1
}

// startPHolder starts a pholder child and waits until it holds.
func startPHolder(t *testing.T, srv *redisServer, prefix, name, kind string, lease time.Duration, env ...string) (*child, uint64) {
	t.Helper()
	env = append(env, "FAULTS_NAME="+name, "FAULTS_KIND="+kind)
	c := startChild(t, "pholder", srv.Addr, prefix, lease, env...)
	tok, err := strconv.ParseUint(c.expect(t, "held", 15*time.Second), 10, 64)
	require.NoError(t, err)
	return c, tok
}

// waitChannels polls until n wakeup channels under prefix have a
// subscriber: the waiters are then asleep on them.
func waitChannels(t *testing.T, srv *redisServer, prefix string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d subscribed channels", n), func() bool {
		chans, _ := srv.do(t, "PUBSUB", "CHANNELS", prefix+":{*").AsStrSlice() // the locks' channels
		return len(chans) >= n
	})
}

// acquireAfterKill runs acquire in a goroutine once ready() says the
// waiter is in place, SIGKILLs hc, and returns how long after the kill the
// acquire returned, with its lock context.
func acquireAfterKill(t *testing.T, hc *child, acquire func(ctx context.Context) (context.Context, error), ready func(), afterKill func()) (time.Duration, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	type res struct {
		lctx context.Context
		err  error
		at   time.Time
	}
	got := make(chan res, 1)
	go func() {
		l, err := acquire(ctx)
		got <- res{l, err, time.Now()}
	}()
	ready()
	killed := time.Now()
	hc.signal(t, syscall.SIGKILL)
	if afterKill != nil {
		afterKill()
	}
	r := <-got
	require.NoError(t, r.err, "acquire after the kill")
	return r.at.Sub(killed), r.lctx
}

const killLease = time.Second

var killBound = killLease + 250*time.Millisecond

func rwState1(t *testing.T, c *dsync.Client, name string) (st dsync.LockState) {
	t.Helper()
	sts, err := c.Inspect(context.Background(), name)
	require.NoError(t, err)
	for _, s := range sts {
		if s.Kind == dsync.KindRWMutex || s.Kind == dsync.KindSemaphore || s.Kind == dsync.KindOnce {
			return s
		}
	}
	return st
}

// TestFaultKillReadHolder: a reader process is SIGKILLed while another
// reader (alive, renewing) holds too and a writer waits; the live reader
// leaves at once, and the writer gets in within lease + 250 ms of the kill:
// the dead reader's hold lapses on its own.
func TestFaultKillReadHolder(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	hc, tok := startPHolder(t, srv, prefix, "rk", "read", killLease)
	c := newDsync(t, srv.Addr, prefix, killLease)
	reader := c.NewRWMutex("rk")
	rctx, err := reader.RLockContext(context.Background())
	require.NoError(t, err)
	w := newDsync(t, srv.Addr, prefix, killLease).NewRWMutex("rk")
	took, lctx := acquireAfterKill(t, hc, w.LockContext,
		func() {
			waitFor(t, 10*time.Second, "the writer queued", func() bool { return len(rwState1(t, c, "rk").Waiters) == 1 })
		},
		func() {
			assert.NoError(t, reader.RUnlockContext(rctx), "live reader's RUnlock")
		})
	t2 := tokenOf(lctx)
	st := rwState1(t, c, "rk")
	t.Logf("SIGKILL of a read holder (lease %v, another reader left at the kill): writer acquired %v after the kill (bound %v); token %d -> %d; Redis: mode %q, %d holders",
		killLease, took.Round(time.Millisecond), killBound, tok, t2, st.Mode, len(st.Holders))
	assert.LessOrEqual(t, took, killBound, "writer acquired after the kill")
	assert.Greater(t, t2, tok, "writer's token not above the dead reader's")
	assert.Equal(t, "write", st.Mode, "Redis shows the mode; want the writer alone")
	assert.Len(t, st.Holders, 1, "Redis shows holders; want the writer alone")
	require.NoError(t, w.UnlockContext(lctx))
}

// TestFaultKillWriteHolder: a writer process is SIGKILLed while a reader
// waits; the reader gets in within lease + 250 ms of the kill.
func TestFaultKillWriteHolder(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	hc, tok := startPHolder(t, srv, prefix, "wk", "write", killLease)
	c := newDsync(t, srv.Addr, prefix, killLease)
	r := c.NewRWMutex("wk")
	took, lctx := acquireAfterKill(t, hc, r.RLockContext,
		func() { waitChannels(t, srv, prefix, 1) }, nil)
	t2 := tokenOf(lctx)
	st := rwState1(t, c, "wk")
	t.Logf("SIGKILL of a write holder (lease %v): waiting reader acquired %v after the kill (bound %v); token %d -> %d; Redis: mode %q, %d holders",
		killLease, took.Round(time.Millisecond), killBound, tok, t2, st.Mode, len(st.Holders))
	assert.LessOrEqual(t, took, killBound, "reader acquired after the kill")
	assert.Greater(t, t2, tok, "reader's token not above the dead writer's")
	assert.Equal(t, "read", st.Mode, "Redis shows the mode; want the reader alone")
	assert.Len(t, st.Holders, 1, "Redis shows holders; want the reader alone")
	require.NoError(t, r.RUnlockContext(lctx))
}

// TestFaultKillSemaphoreHolder: of a Semaphore of 3, a process holding 2
// permits is SIGKILLed while the test holds 1 and waits for 2 more; the
// waiter gets them within lease + 250 ms of the kill. Redis never shows
// more than 3 permits held or free, no fourth permit can be had, and once
// everything is released all 3 are free again.
func TestFaultKillSemaphoreHolder(t *testing.T) {
	const size = 3
	srv := startRedis(t)
	prefix := testPrefix()
	hc, tok := startPHolder(t, srv, prefix, "sk", "sem", killLease, "FAULTS_N=2", "FAULTS_SIZE=3")
	c := newDsync(t, srv.Addr, prefix, killLease)
	sa := c.NewSemaphore("sk", size)
	actx, err := sa.Acquire(context.Background(), 1)
	require.NoError(t, err)
	sb := newDsync(t, srv.Addr, prefix, killLease).NewSemaphore("sk", size)
	// Sample Redis' view meanwhile: never above size.
	stop := make(chan struct{})
	sampled := make(chan [3]int64, 1) // samples, bad, most held
	go func() {
		var n, bad, most int64
		defer func() { sampled <- [3]int64{n, bad, most} }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := rwState1(t, c, "sk")
			var held int64
			for _, h := range st.Holders {
				held += h.Permits
			}
			n++
			most = max(most, held)
			if held > size || st.Free > size || st.Free < 0 {
				bad++
			}
			time.Sleep(2 * time.Millisecond) // sampling period
		}
	}()
	took, bctx := acquireAfterKill(t, hc, func(ctx context.Context) (context.Context, error) { return sb.Acquire(ctx, 2) },
		func() {
			waitFor(t, 10*time.Second, "the waiter queued", func() bool { return len(rwState1(t, c, "sk").Waiters) == 1 })
		}, nil)
	close(stop)
	smp := <-sampled
	full := rwState1(t, c, "sk")
	_, extra, err := newDsync(t, srv.Addr, prefix, killLease).NewSemaphore("sk", size).TryAcquire(context.Background(), 1)
	require.NoError(t, err)
	require.NoError(t, sa.Release(actx, 1))
	require.NoError(t, sb.Release(bctx, 2))
	after := rwState1(t, c, "sk")
	t.Logf("SIGKILL of a holder of 2/3 permits (lease %v): waiter for 2 acquired %v after the kill (bound %v); token %d -> %d; Redis when full: %d free, %d holders; 4th permit granted: %v; after release: %d/%d free; %d samples, most held %d, out of range %d",
		killLease, took.Round(time.Millisecond), killBound, tok, tokenOf(bctx), full.Free, len(full.Holders), extra, after.Free, after.Size, smp[0], smp[2], smp[1])
	assert.LessOrEqual(t, took, killBound, "waiter acquired after the kill")
	assert.Equal(t, int64(0), full.Free, "with 3 permits held: free permits in Redis")
	assert.False(t, extra, "with 3 permits held: a 4th acquire succeeded")
	assert.Equal(t, int64(size), after.Free, "after every release: free permits")
	assert.Empty(t, after.Holders, "after every release: holders")
	assert.Equal(t, int64(0), smp[1], "samples out of range (most held %d)", smp[2])
	assert.LessOrEqual(t, smp[2], int64(size), "most permits held at once")
}

// TestFaultKillOnceRunner: the process running a Once's f is SIGKILLed
// while another caller waits in Do; that caller runs f within lease +
// 250 ms of the kill, its run succeeds and is recorded, and a later Do does
// not run f again.
func TestFaultKillOnceRunner(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	hc, tok := startPHolder(t, srv, prefix, "ok", "once", killLease)
	c := newDsync(t, srv.Addr, prefix, killLease)
	o := c.NewOnce("ok")
	var runTok uint64
	took, _ := acquireAfterKill(t, hc, func(ctx context.Context) (context.Context, error) {
		err := o.Do(ctx, func(fctx context.Context) error {
			runTok = tokenOf(fctx)
			return nil
		})
		return ctx, err
	}, func() { waitChannels(t, srv, prefix, 1) }, nil)
	runs := 0
	require.NoError(t, newDsync(t, srv.Addr, prefix, killLease).NewOnce("ok").Do(context.Background(), func(context.Context) error { runs++; return nil }))
	st := rwState1(t, c, "ok")
	t.Logf("SIGKILL of a Once runner (lease %v): waiting Do ran f and returned %v after the kill (bound %v); token %d -> %d; done in Redis: %v; later Do ran f %d times",
		killLease, took.Round(time.Millisecond), killBound, tok, runTok, st.Done, runs)
	assert.LessOrEqual(t, took, killBound, "the waiting Do ran f and returned after the kill")
	assert.Greater(t, runTok, tok, "the new run's token not above the dead run's")
	assert.True(t, st.Done, "after the successful run: done")
	assert.Equal(t, 0, runs, "after the successful run: later Do ran f")
}
