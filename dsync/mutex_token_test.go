package dsync_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["tokenrun"] = childTokenRun
}

// cycle locks and unlocks m once and returns the token it got.
func cycle(t testing.TB, m *dsync.Mutex, ctx context.Context) uint64 {
	t.Helper()
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	require.NoError(t, m.UnlockContext(lctx))
	return tok
}

// serverMicros is the server clock in µs.
func serverMicros(t testing.TB, s *redistest.Server) uint64 {
	t.Helper()
	v, err := s.Do(t, "TIME").AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseUint(v[0], 10, 64)
	us, _ := strconv.ParseUint(v[1], 10, 64)
	return sec*1_000_000 + us
}

// With WithMaxLocalHandoffs(1000), every acquisition reserves 1,000 tokens.
// The stored counter used to advance by the block per cycle, so a fast
// serial run pushed it seconds ahead of the server clock, and the first
// token after a FLUSHALL came from the clock, below tokens already issued.
// Now no token is ahead of the clock when issued, so FLUSHALL cannot make
// a later token smaller.
func TestMutexTokensBoundedByClockFlushAll(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithMaxLocalHandoffs(1000))
	ctx := ctxT(t)
	m := c.NewMutex("fast")
	var last uint64
	n := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); n++ {
		tok := cycle(t, m, ctx)
		require.Greater(t, tok, last, "token not above the previous one")
		last = tok
	}
	ahead := int64(last) - int64(serverMicros(t, s))
	t.Logf("%d cycles; the last token is %d µs ahead of the server clock", n, ahead)
	assert.LessOrEqual(t, ahead, int64(0), "the last token was ahead of the server clock (µs)")
	require.NoError(t, s.Do(t, "FLUSHALL").Error())
	tok := cycle(t, m, ctx)
	require.Greater(t, tok, last, "token after FLUSHALL %d <= %d issued before (%.3f s below)", tok, last, float64(last-tok)/1e6)
}

// The same under local handoffs: 8 goroutines pass the lock inside the
// Client through whole blocks of 1,000 tokens; no token issued is ahead of
// the server clock, and after a FLUSHALL the next is above all of them.
func TestMutexTokensBoundedByClockLocalHandoffs(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithMaxLocalHandoffs(1000))
	ctx := ctxT(t)
	m := c.NewMutex("hand")
	var mu sync.Mutex
	var toks []uint64
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				lctx, err := m.LockContext(ctx)
				if !assert.NoError(t, err) {
					return
				}
				tok, _ := dsync.FencingToken(lctx)
				now := serverMicros(t, s)
				mu.Lock()
				toks = append(toks, tok)
				assert.LessOrEqual(t, tok, now, "token %d issued %d µs ahead of the server clock", tok, tok-now)
				mu.Unlock()
				if !assert.NoError(t, m.UnlockContext(lctx)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	var maxTok uint64
	for _, tok := range toks {
		maxTok = max(maxTok, tok)
	}
	t.Logf("%d acquisitions", len(toks))
	require.NoError(t, s.Do(t, "FLUSHALL").Error())
	require.Greater(t, cycle(t, m, ctx), maxTok, "token after FLUSHALL not above the ones issued before")
}

// childTokenRun: lock/unlock "crash" as fast as possible for DSYNC_TEST_FOR
// with WithMaxLocalHandoffs(1000), then lock it once more, print "held
// <last token>" and hang (the test kills the process).
func childTokenRun(c *dsync.Client, rc rueidis.Client, prefix string) int {
	d, _ := time.ParseDuration(os.Getenv("DSYNC_TEST_FOR"))
	m := c.NewMutex("crash")
	ctx := context.Background()
	var last uint64
	for end := time.Now().Add(d); ; {
		lctx, err := m.LockContext(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		last, _ = dsync.FencingToken(lctx)
		if time.Now().After(end) {
			break
		}
		if err := m.UnlockContext(lctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("held %d\n", last)
	select {}
}

// A holder killed after a fast serial run leaves no free marker: its key
// expires with the lease and the next token comes from the server clock.
// It used to be seconds below the dead holder's tokens; now it is above.
func TestMutexTokensAfterHolderCrash(t *testing.T) {
	prefix := testPrefix(t)
	cmd := startChild(t, "tokenrun", prefix, "DSYNC_TEST_FOR=1s", "DSYNC_TEST_LEASE=500ms", "DSYNC_TEST_HANDOFFS=1000")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child said %q", line)
	require.True(t, strings.HasPrefix(line, "held "), "child said %q", line)
	last, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "held ")), 10, 64)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	lctx, err := c.NewMutex("crash").LockContext(ctx) // after the dead holder's lease
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	require.Greater(t, tok, last, "token after the holder's crash %d <= its last %d (%.3f s below)", tok, last, float64(last-tok)/1e6)
}

// A restart without persistence while the lock passes inside one Client:
// the holders end as lost within about one renewal interval (the renewal
// that finds the lock gone reaches the live hold), the local waiters go to
// Redis, and the next token is above every earlier one.
func TestMutexRestartDuringLocalHandoffs(t *testing.T) {
	s := redistest.Start(t)
	const lease = 600 * time.Millisecond
	c := newClientOn(t, s.Client(t), dsync.WithLease(lease), dsync.WithMaxLocalHandoffs(100000))
	ctx := ctxT(t)
	m := c.NewMutex("restart")
	var mu sync.Mutex
	var maxBefore uint64
	var lostAt time.Time
	var held atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				lctx, err := m.LockContext(ctx)
				if err != nil {
					continue // Redis restarting: try again
				}
				tok, _ := dsync.FencingToken(lctx)
				held.Add(1)
				// When the hold is lost, its context is cancelled with
				// ErrLockLost: note the first such moment.
				stopWatch := context.AfterFunc(lctx, func() {
					if errors.Is(context.Cause(lctx), dsync.ErrLockLost) {
						mu.Lock()
						if lostAt.IsZero() {
							lostAt = time.Now()
						}
						mu.Unlock()
					}
				})
				time.Sleep(100 * time.Microsecond) // the holder's work
				_ = m.UnlockContext(lctx)
				stopWatch()
				mu.Lock()
				if lostAt.IsZero() {
					maxBefore = max(maxBefore, tok)
				}
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 5*time.Second, "the lock to pass locally", func() bool { return held.Load() > 200 })
	require.NoError(t, s.Restart())
	at := time.Now()
	waitFor(t, 5*time.Second, "a holder to see the lock lost", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !lostAt.IsZero()
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	d := lostAt.Sub(at)
	mu.Unlock()
	t.Logf("the live hold was lost %v after the restart", d)
	// The next renewal round (within lease/3) finds the lock gone; if it
	// meets the server still restarting, the retry follows lease/9 later.
	assert.LessOrEqual(t, d, lease/3+lease/9+150*time.Millisecond, "hold lost after the restart, want within a renewal interval and its retry")
	require.Greater(t, cycle(t, m, ctx), maxBefore, "token after the restart not above the ones issued before")
}

// No key of an acquisition outlives it: after 1,000 cycles, on the lock
// context path with a caller-supplied owner (which takes an attempt marker
// for the exact undo) and on the sync.Locker path, only the one free
// marker of the name is left. Each cycle used to leave a marker key with a
// lease-long TTL.
func TestMutexCyclesLeaveNoKeys(t *testing.T) {
	c := newClient(t)
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := func() []string {
		ks, err := rc.Do(ctx, rc.B().Keys().Pattern(prefixOf(t, c)+":*").Build()).AsStrSlice()
		require.NoError(t, err)
		return ks
	}
	for _, tc := range []struct {
		name  string
		cycle func(m *dsync.Mutex)
	}{
		{"LockContext with WithOwner", func(m *dsync.Mutex) {
			lctx, err := m.LockContext(dsync.WithOwner(ctx))
			require.NoError(t, err)
			require.NoError(t, m.UnlockContext(lctx))
		}},
		{"Lock", func(m *dsync.Mutex) {
			m.Lock()
			defer m.Unlock()
		}},
	} {
		m := c.NewMutex("keys-" + tc.name)
		for i := 0; i < 1000; i++ {
			tc.cycle(m)
		}
		waitFor(t, 5*time.Second, "at most the free marker to be left", func() bool {
			ks := keys()
			if len(ks) > 1 {
				return false
			}
			for _, k := range ks {
				require.True(t, strings.HasSuffix(k, ":mutex"), "%s: key %q left", tc.name, k)
			}
			return true
		})
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(keys()...).Build()).Error())
	}
}
