package faults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	childRoles["checker"] = childChecker
}

// dsyncBugs turns on the assertions that dsync fails today, each reported
// to the lead with its reproducer (/work/wt/notes/faults.md):
//
//   - TestFaultChaos: FairMutex and RWMutex (and Semaphore) acquisitions
//     fail with "dsync: redis connection: context deadline exceeded" (or
//     "canceled", or "dial tcp ...: operation was canceled") while their
//     own context is live, in processes that see nothing wrong (seen after
//     another process's SIGKILL, and under network faults);
//   - TestFaultNetworkPrimitives: cancelled waits must return within 100 ms
//     of their context and leave no wakeup channel subscribed. Since dsync
//     tries a queue leave / undo within 40 ms and sweeps every idle
//     channel, 16 of the 18 fault rows pass; a Semaphore wait under the
//     timeout and limit_data faults still returned 101 and 126 ms after
//     its context in the last run.
//
// Without it those figures are measured and written to the report, not
// asserted.
var dsyncBugs = flag.Bool("dsyncbugs", false, "also assert the bounds dsync misses today (see margin_test.go)")

// childChecker acquires FAULTS_NAME, says "held", then has 4 goroutines
// check the lock context in a loop, as holders about to write do: two
// spin, two sleep 1 ms between checks. Each check that finds the context
// valid records the time read just before it. When the context is
// cancelled it says "valid <latest such time> <when the cancellation was
// first seen>" and exits.
func childChecker(c *dsync.Client, _ remote) int {
	lctx, err := c.NewMutex(os.Getenv("FAULTS_NAME")).LockContext(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "checker:", err)
		return 1
	}
	var last, seen atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := now()
				if lctx.Err() != nil {
					seen.CompareAndSwap(0, now())
					return
				}
				for {
					l := last.Load()
					if t0 <= l || last.CompareAndSwap(l, t0) {
						break
					}
				}
				if i%2 == 1 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	for last.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	say("held", "1")
	wg.Wait()
	say("valid", fmt.Sprintf("%d %d", last.Load(), seen.Load()))
	return 0
}

// TestFaultStopMargin: the bound of the reliability issue for a frozen
// holder. A process holding a Mutex (lease 1 s) is SIGSTOPped for 2
// leases while another process waits; the waiter is granted the lock
// once the lease has lapsed in Redis; then the holder is thawed. The
// margin is the time between the last moment the frozen holder's lock
// context reported the hold valid and the grant to the other process: it
// must be positive (the holder may not believe in its hold after someone
// else got it). It used to be negative (-1.0 to -1.2 s: the thawed
// holder's checks saw its context valid for a few ms after SIGCONT, until
// the lease-clock timer ran); the lock context's Err now reads the lease
// clock itself. In CI.
func TestFaultStopMargin(t *testing.T) {
	const rounds = 5
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = time.Second
	var worst time.Duration
	for r := range rounds {
		name := fmt.Sprint("margin", r)
		hc := startChild(t, "checker", srv.Addr, prefix, lease, "FAULTS_NAME="+name)
		hc.expect(t, "held", 15*time.Second)
		m := newDsync(t, srv.Addr, prefix, lease).NewMutex(name)
		hc.signal(t, syscall.SIGSTOP)
		stopped := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lctx, err := m.LockContext(ctx)
		cancel()
		require.NoError(t, err)
		granted := now()
		time.Sleep(time.Until(stopped.Add(2 * lease)))
		hc.signal(t, syscall.SIGCONT)
		thawed := now()
		var last, seen int64
		fmt.Sscan(hc.expect(t, "valid", 5*time.Second), &last, &seen)
		margin := time.Duration(granted - last)
		worst = min(worst, margin)
		if r == 0 {
			worst = margin
		}
		t.Logf("round %d: granted to the other process %v after SIGSTOP; holder's last valid check %v after SIGCONT, cancellation seen %v after SIGCONT; margin %v",
			r, time.Duration(granted-stopped.UnixNano()).Round(time.Millisecond), time.Duration(last-thawed), time.Duration(seen-thawed), margin)
		require.NoError(t, m.UnlockContext(lctx))
	}
	t.Logf("SIGSTOP 2x lease, %d rounds: smallest margin between the frozen holder's last valid check and the grant to another process: %v (must be > 0)", rounds, worst)
	assert.Positive(t, worst, "the smallest margin: a thawed holder's lock context reported its hold valid %v after another process was granted the lock", -worst)
}
