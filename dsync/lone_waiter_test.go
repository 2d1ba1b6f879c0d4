package dsync_test

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
)

// TestLoneWaiterWritesNoLocalEntry: a goroutine that waits for a Mutex in
// Redis with no goroutine of its Client queued behind it is counted by its
// attempts' entry; its Client writes no local waiters' entry for it, not
// even the removal of one never written. Before, every such wait cost a
// script call for nothing, sent in the background during the wait (4
// calls with "<client> local" among their arguments in MONITOR here). With
// a goroutine queued behind the leader the entry is written, then
// removed: the check sees writes where there are some.
func TestLoneWaiterWritesNoLocalEntry(t *testing.T) {
	srv := redistest.Start(t)
	mon := monitor(t, srv.Addr)
	holder, err := dsync.NewClient(srv.Client(t), dsync.WithKeyPrefix("lone"))
	require.NoError(t, err)
	defer holder.Close()
	waiter, err := dsync.NewClient(srv.Client(t), dsync.WithKeyPrefix("lone"))
	require.NoError(t, err)
	defer waiter.Close()
	ctx := ctxT(t)

	// seen counts the local waiters' script calls ("<client> local" among
	// their arguments, not run inside a script) MONITOR has shown.
	seen := 0
	writes := func() int {
		for _, ln := range mon.all() {
			if strings.Contains(ln, ` local"`) && !strings.Contains(ln, "[0 lua]") {
				seen++
			}
		}
		return seen
	}
	// run has goroutines of waiter wait for a lock holder holds, releases
	// it once they are counted (and, with queued, once the local entry is
	// written: it is written countDelay after the change), and returns the
	// calls seen during it.
	run := func(name string, goroutines int, queued bool) int {
		from := writes()
		hm := holder.NewMutex(name)
		held, err := hm.LockContext(ctx)
		require.NoError(t, err)
		wm := waiter.NewMutex(name)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				l, err := wm.LockContext(ctx)
				if err == nil {
					err = wm.UnlockContext(l)
				}
				require.NoError(t, err)
			})
		}
		waitFor(t, 10*time.Second, "the waiters counted by Inspect", func() bool {
			return waitingCount(t, holder, name, dsync.KindMutex) == int64(goroutines)
		})
		if queued {
			waitFor(t, 10*time.Second, "the local entry written", func() bool { return writes() > from })
		}
		require.NoError(t, hm.UnlockContext(held))
		wg.Wait()
		waitFor(t, 10*time.Second, "the local waiters' writer to end", func() bool { return dsync.LocalWaitersIdle(waiter) })
		return writes() - from
	}
	require.Zero(t, run("alone", 1, false), "local waiters' script calls for a lone waiter")
	// The entry written, then removed: a removal is still sent where an
	// entry was written.
	require.GreaterOrEqual(t, run("queued", 2, true), 2, "local waiters' script calls with one goroutine queued behind the leader")
}

// monitored is a MONITOR connection's commands so far.
type monitored struct {
	mu  sync.Mutex
	got []string // the lines not yet returned by all
}

// all returns the lines not returned before.
func (m *monitored) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.got
	m.got = nil
	return out
}

// monitor opens a MONITOR connection to addr, read until the test ends.
func monitor(t *testing.T, addr string) *monitored {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n"))
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	ok, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok)
	m := &monitored{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ln, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.got = append(m.got, ln)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return m
}
