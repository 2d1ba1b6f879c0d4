package dsync_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// srv is the redis-server shared by the package's tests; each test uses its
// own key prefix, so tests do not see each other's locks.
var srv *redistest.Server

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	var err error
	srv, err = redistest.StartServer()
	if err != nil && os.Getenv("CI") != "" {
		fmt.Fprintln(os.Stderr, "redis-server is required under CI:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopScaleOut() // cluster, sentinel and RedLock servers (cluster_test.go), if started
	if srv != nil {
		srv.Stop()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the shared server, failing or skipping without one.
func server(t testing.TB) *redistest.Server {
	t.Helper()
	redistest.Require(t)
	require.NotNil(t, srv, "the shared redis-server did not start")
	return srv
}

var prefixMu sync.Mutex

var prefixSeq struct {
	sync.Mutex
	n int
}

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string {
	prefixSeq.Lock()
	defer prefixSeq.Unlock()
	prefixSeq.n++
	return fmt.Sprintf("t%d-%d", os.Getpid(), prefixSeq.n)
}

// newRueidis returns a rueidis client for the shared server.
func newRueidis(t testing.TB) rueidis.Client {
	return server(t).Client(t)
}

// newClient returns a dsync Client on the shared server with a prefix of
// its own (or the given one), closed when t ends.
func newClient(t testing.TB, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	prefix := testPrefix(t)
	opts = append([]dsync.Option{dsync.WithKeyPrefix(prefix)}, opts...)
	c := newClientOn(t, newRueidis(t), opts...)
	prefixMu.Lock()
	clientPrefix[c] = prefix
	prefixMu.Unlock()
	return c
}

func newClientOn(t testing.TB, rc rueidis.Client, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	c, err := dsync.NewClient(rc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitPreloaded waits until c's preload of its scripts has ended. A test
// whose proxy cuts, freezes or holds c's connections starts its fault after
// it: the preload dials a connection of its own, and its loads must not be
// what the fault catches.
func waitPreloaded(t testing.TB, c *dsync.Client) {
	t.Helper()
	select {
	case <-dsync.Preloaded(c):
	case <-time.After(20 * time.Second):
		t.Fatal("the Client's preload of its scripts did not end within 20 s")
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out after %v waiting for %s", d, what)
		time.Sleep(time.Millisecond)
	}
}

// ctxT is a context bounded by the test's deadline, or a minute.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitSubscribed waits until some connection is subscribed to channel ch on
// any node rc knows (a waiter subscribes before it blocks).
func waitSubscribed(t testing.TB, rc rueidis.Client, ch string) {
	t.Helper()
	waitFor(t, 5*time.Second, "a waiter to subscribe to "+ch, func() bool {
		for _, n := range rc.Nodes() {
			m, err := n.Do(context.Background(), n.B().PubsubNumsub().Channel(ch).Build()).AsIntMap()
			if err == nil && m[ch] > 0 {
				return true
			}
		}
		return false
	})
}

// resetStats resets the server's command counts (CONFIG RESETSTAT) once
// the Clients that use it are done with their start-up calls, made in the
// background: the preload of their scripts, one per round trip (a SCRIPT
// LOAD is not a cycle's command), and the check of every hold made when
// the control subscription comes up, which runs the renewal script where a
// lock is held (it once ran after the reset of an internal test:
// TestMutexLateUndoLooksFirst).
func resetStats(t testing.TB, ctx context.Context, rc rueidis.Client, cs ...*dsync.Client) {
	t.Helper()
	for _, c := range cs {
		select {
		case <-dsync.Preloaded(c):
		case <-time.After(30 * time.Second):
			t.Fatal("a Client's preload of its scripts did not end within 30 s")
		}
		waitFor(t, 30*time.Second, "a Client's control subscription and its check of the holds", func() bool { return dsync.ForceSubscribed(c) })
	}
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
}

// commandCalls returns the commands the server counted since the last
// CONFIG RESETSTAT (INFO commandstats, commands inside scripts included;
// INFO and RESETSTAT themselves left out), and the stats.
func commandCalls(t testing.TB, ctx context.Context, rc rueidis.Client) (int, string) {
	t.Helper()
	info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	total := 0
	for _, m := range commandStat.FindAllStringSubmatch(info, -1) {
		if m[1] == "info" || m[1] == "config|resetstat" {
			continue
		}
		v, _ := strconv.Atoi(m[2])
		total += v
	}
	return total, info
}

var commandStat = regexp.MustCompile(`cmdstat_([\w|]+):calls=(\d+)`)
