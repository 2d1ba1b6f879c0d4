package faults

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
)

// Network faults for the primitives with a queue or permits (FairMutex,
// RWMutex, Semaphore): three Clients behind a proxy, two goroutines each,
// contend on one lock for 3 s (acquisitions with a 3 s deadline, or 1-50 ms,
// or cancelled after 0-30 ms, as in the chaos scenario) while the fault
// strikes: latency (a 300 ms round trip), toxiproxy's timeout (data stops,
// the connection closes after 200 ms), resets, limit_data (connections cut
// after 2 KiB) in bursts of 300 ms every 800 ms, or a blackhole of 1.5
// leases. The history must be linearizable, no call may return more than
// 100 ms after its context ended (when its Done channel closed: on a
// loaded machine Go runs the deadline timer late, and how late is
// reported apart; see waitEnd), and once the fault is gone, while the
// Clients stay open, Redis must show within 6 s no holder, no waiter, no
// entry in the raw queue structures, every permit free, and no wakeup
// channel subscribed.
func TestFaultNetworkPrimitives(t *testing.T) {
	faults := []string{"none", "latency", "timeout", "reset", "limit_data", "blackhole"}
	for _, kind := range []string{"fair", "rw", "sem"} {
		for _, f := range faults {
			t.Run(kind+"/"+f, func(t *testing.T) { networkPrim(t, kind, f) })
		}
	}
}

var netCleanBound = 6 * time.Second

func networkPrim(t *testing.T, kind, fault string) {
	const lease = time.Second
	dur := 3 * time.Second
	srv := startRedis(t)
	px := newProxy(t, srv.Addr)
	prefix := testPrefix()
	store := newChaosStore(chaosSemSize)
	url := store.serve(t)
	res := chaosRes{remote{url: url, hc: newHTTPClient(t)}, 0}
	var (
		mu  sync.Mutex
		ev  []cev
		tl  chaosTally
		tmu sync.Mutex
		seq atomic.Int64
		wg  sync.WaitGroup
	)
	until := time.Now().Add(dur)
	slow := func(o *rueidis.ClientOption) { o.ConnWriteTimeout = time.Second }
	for c := range 3 {
		dc := newDsync(t, px.Addr, prefix, lease, slow)
		for g := range 2 {
			w := &chaosWorker{c: dc, res: res, who: c*2 + g, until: until, tl: &tl, mu: &tmu, seq: &seq,
				rec: func(e cev) { mu.Lock(); ev = append(ev, e); mu.Unlock() }}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.lockLoop(kind, w.lockKind(kind))
			}()
		}
	}
	// The fault.
	struck := 0
	time.Sleep(300 * time.Millisecond)
	switch fault {
	case "none": // the control
	case "blackhole":
		off := px.blackhole(t)
		time.Sleep(3 * lease / 2)
		off()
		struck = 1
	default:
		for time.Until(until) > time.Second {
			var off func()
			switch fault {
			case "latency":
				off = px.latency(t, 150*time.Millisecond)
			case "timeout":
				off = px.timeoutToxic(t, 200)
			case "reset":
				off = px.reset(t)
			case "limit_data":
				off = px.limitData(t, 2048)
			}
			time.Sleep(300 * time.Millisecond)
			off()
			struck++
			time.Sleep(500 * time.Millisecond)
		}
	}
	wg.Wait()
	end := now()
	healed := time.Now()

	// After the fault, with every Client still open.
	c := newDsync(t, srv.Addr, prefix, lease)
	base := prefix + ":{c0}:" + kind
	raw := map[string][]string{
		"fair": {"LLEN " + base + ":queue", "ZCARD " + base + ":places"},
		"rw":   {"LLEN " + base + ":queue", "ZCARD " + base + ":places", "ZCARD " + base + ":readers"},
		"sem":  {"LLEN " + base + ":waiters", "HLEN " + base + ":want", "ZCARD " + base + ":holders"},
	}[kind]
	var left []string
	clean := func() bool {
		left = left[:0]
		sts, err := c.Inspect(context.Background(), "c0")
		if err != nil {
			left = append(left, err.Error())
		}
		for _, st := range sts {
			if len(st.Holders) > 0 || len(st.Waiters) > 0 {
				left = append(left, fmt.Sprintf("%s: %d holders, %d waiters", st.Kind, len(st.Holders), len(st.Waiters)))
			}
			if st.Kind == dsync.KindSemaphore && st.Free != chaosSemSize {
				left = append(left, fmt.Sprintf("%d of %d permits free", st.Free, chaosSemSize))
			}
		}
		for _, q := range raw {
			if n, _ := srv.do(t, strings.Fields(q)...).AsInt64(); n != 0 {
				left = append(left, fmt.Sprintf("%s = %d", q, n))
			}
		}
		return len(left) == 0
	}
	deadline := time.Now().Add(netCleanBound)
	for !clean() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cleanAfter := time.Since(healed)
	// Wakeup subscriptions linger 2 s after their last waiter and are
	// swept every 2 s: every channel must be gone within 5 s.
	var subs []string
	const subsBound = 5 * time.Second
	for sd := time.Now().Add(subsBound); ; time.Sleep(50 * time.Millisecond) {
		subs, _ = srv.do(t, "PUBSUB", "CHANNELS", prefix+":{*").AsStrSlice() // the locks' channels
		if len(subs) == 0 || time.Now().After(sd) {
			break
		}
	}
	subsAfter := time.Since(healed)
	run := &chaosRun{open: map[int]int{}, killed: map[int]bool{}}
	slices.SortStableFunc(ev, func(a, b cev) int { return cmp.Compare(a.Ret, b.Ret) })
	fig := checkChaos(t, kind, ev, run, end)
	sf := store.figures()
	t.Logf("%s under %s (%d strikes): %d acquisitions, %d ops checked (%s), %d waits cancelled, worst return %v after the context ended (%d over 100 ms; its timers ran up to %v late, %d over 100 ms), %d holds lost, %d Redis errors; fenced: %d stale rejected, %d lost; Redis clean %v after the fault (left: %v); %d wakeup channels still subscribed %v after it",
		kindTitle(kind), fault, struck, tl.Acq, fig.ops, fig.verdict, tl.Cancelled, ms(tl.MaxLate), tl.Late, ms(tl.MaxTimer), tl.TimerLate, tl.Lost, tl.Errs,
		sf.fencedRejected+sf.staleReads, sf.fencedLost, cleanAfter.Round(time.Millisecond), left, len(subs), subsAfter.Round(time.Millisecond))
	row := reportRow{Scenario: "3 network: " + fault, Primitive: kindTitle(kind), Size: fmt.Sprintf("3 Clients x 2 x %v", dur),
		Faults: fmt.Sprintf("%d strikes, %d cancel (latest return %v after its context ended; its timers up to %v late); %d errors", struck, tl.Cancelled, ms(tl.MaxLate), ms(tl.MaxTimer), tl.Errs),
		Ops:    int64(fig.ops), Check: fig.verdict,
		Overlaps: sf.overlaps, Lost: sf.lostUpdates, Rejected: sf.fencedRejected + sf.staleReads, FencedLost: sf.fencedLost, Fenced: kind != "sem",
		RecoveryNote: fmt.Sprintf("clean %v after; %d channels subscribed %v after", cleanAfter.Round(time.Millisecond), len(subs), subsAfter.Round(time.Millisecond)),
		Leaked:       -1,
		Command:      fmt.Sprintf("cd faults && GOWORK=off go test -race -count=1 -run 'TestFaultNetworkPrimitives/^%s$/^%s$' .", kind, fault)}
	defer func() { row.Failed = t.Failed(); addRow(row) }()
	assert.Empty(t, left, "%v after the fault Redis still shows", netCleanBound)
	assert.Empty(t, subs, "%v after the fault, every waiter gone and the Clients open, wakeup channels still subscribed", subsAfter)
	assert.Zero(t, tl.Late, "calls that returned more than 100 ms after their context ended (worst %v: %s)", time.Duration(tl.MaxLate), tl.Worst)
	assert.Zero(t, sf.fencedLost, "updates the fenced counter lost")
	assert.GreaterOrEqual(t, fig.acquisitions, 20, "acquisitions: the scenario did not happen")
	assert.NotZero(t, tl.Cancelled, "cancelled waits: the scenario did not happen")
}

// newHTTPClient is an HTTP client for a store in this process, its idle
// connections closed when t ends.
func newHTTPClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}
