package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario (i): goroutines in several Clients contend on one Mutex through
// a proxy while a random fault strikes every 1-2 s: latency, a short
// blackhole, resets, a killed pub/sub connection, DEBUG SLEEP, CLIENT
// PAUSE WRITE, a frozen redis-server. These are the faults a lease lock
// must survive without two holders (FLUSHALL and restarts, which drop the
// lock from under its holder, are checked in server_test.go). The history
// must be linearizable, no update lost, tokens increasing, and Redis
// connections back to the baseline afterwards. 2 min by default (the CI
// run), 10 min with -soak.
func TestFaultSoak(t *testing.T) {
	dur := 2 * time.Minute
	if *soak {
		dur = 10 * time.Minute
	}
	srv := startRedis(t)
	px := newProxy(t, srv.Addr)
	prefix := testPrefix()
	const lease = time.Second
	baseConns := connectedClients(t, srv)
	st := &store{}
	var h history
	var tl tally
	var wg sync.WaitGroup
	until := time.Now().Add(dur)
	var rcs []rueidis.Client
	var cs []*dsync.Client
	for i := range 4 {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.Addr}, DisableCache: true,
			ConnWriteTimeout: 500 * time.Millisecond, Dialer: dialer()})
		require.NoError(t, err)
		c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
		require.NoError(t, err)
		rcs, cs = append(rcs, rc), append(cs, c)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(context.Background(), c.NewMutex("soak"), i*10+g, st, h.add, until, 2*time.Second, &tl)
			}()
		}
	}
	faults := map[string]func(){
		"latency 100ms":   func() { defer px.latency(t, 50*time.Millisecond)(); time.Sleep(time.Second) },
		"blackhole 400ms": func() { defer px.blackhole(t)(); time.Sleep(400 * time.Millisecond) },
		"resets 50ms":     func() { defer px.reset(t)(); time.Sleep(50 * time.Millisecond) },
		"kill pubsub":     func() { _ = srv.do(t, "CLIENT", "KILL", "TYPE", "pubsub").Error() },
		"DEBUG SLEEP 0.2": func() { _ = srv.do(t, "DEBUG", "SLEEP", "0.2").Error() },
		"CLIENT PAUSE 300 WRITE": func() {
			_ = srv.do(t, "CLIENT", "PAUSE", "300", "WRITE").Error()
			time.Sleep(300 * time.Millisecond)
		},
		"SIGSTOP redis 500ms": func() {
			srv.signal(t, syscall.SIGSTOP)
			time.Sleep(500 * time.Millisecond)
			srv.signal(t, syscall.SIGCONT)
		},
	}
	names := make([]string, 0, len(faults))
	for n := range faults {
		names = append(names, n)
	}
	injected := map[string]int{}
	for time.Until(until) > 2*time.Second {
		time.Sleep(time.Second + rand.N(time.Second))
		n := names[rand.IntN(len(names))]
		injected[n]++
		faults[n]()
	}
	wg.Wait()
	for i := range cs {
		cs[i].Close()
		rcs[i].Close()
	}
	holds := h.check(t)
	acc, rej := st.counts()
	var conns int64
	waitFor(t, 5*time.Second, "Redis connections back to the baseline", func() bool {
		conns = connectedClients(t, srv)
		return conns <= baseConns
	})
	var inj []string
	for n, k := range injected {
		inj = append(inj, fmt.Sprintf("%s x%d", n, k))
	}
	t.Logf("(i) soak %v, 4 Clients x 2 goroutines, faults: %s; %d holds, %d lost by lease, %d acquire timeouts, %d errors; lost updates %d; fenced writes %d accepted / %d rejected; Redis connections %d (baseline %d)",
		dur, strings.Join(inj, ", "), holds, tl.lost.Load(), tl.timeouts.Load(), tl.errs.Load(), st.lostUpdates(), acc, rej, conns, baseConns)
	assert.Equal(t, int64(0), st.lostUpdates(), "register updates lost under faults")
	assert.GreaterOrEqual(t, holds, 20, "only %d holds in %v", holds, dur)
}

func dialer() (d net.Dialer) {
	d.Timeout = 500 * time.Millisecond
	return d
}

// connectedClients is Redis's count of client connections, less the one
// asking.
func connectedClients(t *testing.T, srv *redisServer) int64 {
	info, _ := srv.do(t, "INFO", "clients").ToString()
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "connected_clients:"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n - 1
		}
	}
	return -1
}
