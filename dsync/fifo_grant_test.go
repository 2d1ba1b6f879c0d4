package dsync_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The FIFO locks are granted by the release (see fair_lib.lua): these tests
// take the grant's message away, cancel the grantee as it is granted, and
// kill the grantee's process, for each lock that grants: a FairMutex, an
// RWMutex's write and read locks, and a size-1 Semaphore.

// fifoRows are the rows of the contract table whose locks are granted.
func fifoRows() []contractRow {
	var rows []contractRow
	for _, r := range contractRows() {
		switch r.name {
		case "FairMutex", "RWMutexWrite", "RWMutexRead", "Semaphore1":
			rows = append(rows, r)
		}
	}
	return rows
}

// waitersOf returns how many waiters Redis has queued for name: the ones
// Inspect reports (FairMutex, RWMutex writers, Semaphore), and the readers
// waiting for an RWMutex's writer.
func waitersOf(t *testing.T, c *dsync.Client, name string) int {
	t.Helper()
	states, err := c.Inspect(ctxT(t), name)
	require.NoError(t, err)
	n := 0
	for _, s := range states {
		n += len(s.Waiters)
	}
	rc := newRueidis(t)
	readers, err := rc.Do(ctxT(t), rc.B().Zcard().Key(rwKeys(prefixOf(t, c), name)[4]).Build()).AsInt64()
	require.NoError(t, err)
	return n + int(readers)
}

// A grant whose message is lost (the waiter's pub/sub connection killed
// between its queueing and the release) is found at once: the broken
// subscription makes the waiter look again, and its attempt claims the
// grant, long before its fallback (lease/3).
func TestFIFOLostGrantMessage(t *testing.T) {
	for _, row := range fifoRows() {
		t.Run(row.name, func(t *testing.T) {
			rc := newRueidis(t)
			ca := newClient(t)
			cb := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, ca)))
			holder, waiter := row.probe(ca, "lost"), row.open(cb, "lost")
			hctx, err := holder.lock(ctxT(t))
			require.NoError(t, err)
			got := make(chan error, 1)
			var wctx context.Context
			go func() {
				l, err := waiter.lock(ctxT(t))
				wctx = l
				got <- err
			}()
			waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return waitersOf(t, ca, "lost") == 1 })
			require.NoError(t, rc.Do(ctxT(t), rc.B().ClientKill().TypePubsub().Build()).Error())
			released := time.Now()
			require.NoError(t, holder.unlock(hctx))
			select {
			case err := <-got:
				require.NoError(t, err)
			case <-time.After(3 * time.Second):
				t.Fatal("the waiter did not find its grant after its message was lost")
			}
			took := time.Since(released)
			t.Logf("granted %v after the release, its message lost", took)
			ht, _ := dsync.FencingToken(hctx)
			wt, ok := dsync.FencingToken(wctx)
			require.True(t, ok, "no fencing token")
			require.Greater(t, wt, ht, "the grant's token")
			require.NoError(t, waiter.unlock(wctx))
			l, _ := acquireWithin(t, holder, 500*time.Millisecond, "another owner after the grantee's release")
			require.NoError(t, holder.unlock(l))
		})
	}
}

// A grantee whose context ends as it is granted leaves nothing: whether
// its call returned the lock or an error, another Client then acquires
// within 500 ms, and no waiter is left in the queue.
func TestFIFOGranteeCancelledAtGrant(t *testing.T) {
	const tries = 200
	for _, row := range fifoRows() {
		t.Run(row.name, func(t *testing.T) {
			ca := newClient(t)
			cb := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, ca)))
			holder, waiter := row.probe(ca, "cancel"), row.open(cb, "cancel")
			cancelled := 0
			for i := range tries {
				hctx, err := holder.lock(ctxT(t))
				require.NoError(t, err, "try %d", i)
				ctx, cancel := context.WithCancel(context.Background())
				got := make(chan error, 1)
				var wctx context.Context
				go func() {
					l, err := waiter.lock(ctx)
					wctx = l
					got <- err
				}()
				waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return waitersOf(t, ca, "cancel") == 1 })
				// The release grants; the cancel lands before, with or
				// after the grant's message, spread over ~200 µs.
				delay := time.Duration(i%20) * 10 * time.Microsecond
				timer := time.AfterFunc(delay, cancel)
				require.NoError(t, holder.unlock(hctx), "try %d", i)
				err = <-got
				timer.Stop()
				cancel()
				if err == nil {
					require.NoError(t, waiter.unlock(wctx), "try %d", i)
				} else {
					require.ErrorIs(t, err, context.Canceled, "try %d", i)
					cancelled++
				}
				l, _ := acquireWithin(t, holder, 500*time.Millisecond, "try "+strconv.Itoa(i)+": another Client after the grantee's call returned")
				require.NoError(t, holder.unlock(l), "try %d", i)
				require.Zero(t, waitersOf(t, ca, "cancel"), "try %d: a waiter left in the queue", i)
			}
			t.Logf("%d of %d grantees returned an error (cancelled), the rest the lock", cancelled, tries)
		})
	}
}

// A grantee whose process is killed right after the release that granted
// it costs at most its lease (plus the waiters' lease/3 look-again): the
// next waiter holds within it.
func TestFIFOGranteeKilledAfterGrant(t *testing.T) {
	const lease = time.Second
	for _, row := range fifoRows() {
		t.Run(row.name, func(t *testing.T) {
			// Every Client on the short lease, so that waiters look again
			// (lease/3) before the dead grantee's lease ends.
			c := newClient(t, dsync.WithLease(lease))
			prefix := prefixOf(t, c)
			holder := row.probe(c, "kill")
			hctx, err := holder.lock(ctxT(t))
			require.NoError(t, err)
			child := startChild(t, "fifowait", prefix, "DSYNC_TEST_ROW="+row.name, "DSYNC_TEST_NAME=kill", "DSYNC_TEST_LEASE="+lease.String())
			require.NoError(t, child.Start())
			t.Cleanup(func() { child.Process.Kill(); child.Wait() })
			waitFor(t, 5*time.Second, "the child to queue", func() bool { return waitersOf(t, c, "kill") == 1 })
			next := make(chan time.Time, 1)
			go func() {
				l, err := holder.lock(ctxT(t))
				if err == nil {
					next <- time.Now()
					err = holder.unlock(l)
				}
				if err != nil {
					next <- time.Time{}
				}
			}()
			waitFor(t, 2*time.Second, "the second waiter to queue", func() bool { return waitersOf(t, c, "kill") == 2 })
			require.NoError(t, holder.unlock(hctx))
			killed := time.Now()
			require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			var at time.Time
			select {
			case at = <-next:
				require.False(t, at.IsZero(), "the next waiter failed")
			case <-time.After(5 * lease):
				t.Fatal("the dead grantee kept the lock")
			}
			t.Logf("next waiter held %v after the grantee was killed (its lease %v)", at.Sub(killed), lease)
			require.LessOrEqual(t, at.Sub(killed), lease+lease/2, "the dead grantee kept the lock longer than its lease")
		})
	}
}

func init() {
	childRoles["fifowait"] = childFIFOWait
}

// childFIFOWait waits for the lock of row DSYNC_TEST_ROW called
// DSYNC_TEST_NAME, then holds it until killed.
func childFIFOWait(c *dsync.Client, _ rueidis.Client, _ string) int {
	for _, r := range fifoRows() {
		if r.name == os.Getenv("DSYNC_TEST_ROW") {
			if _, err := r.open(c, os.Getenv("DSYNC_TEST_NAME")).lock(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			select {}
		}
	}
	fmt.Fprintln(os.Stderr, "unknown row", os.Getenv("DSYNC_TEST_ROW"))
	return 2
}
