package dsyncotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// blockStats is what the spans say about the waits of one kind: of the
// acquisitions that got the lock after waiting more than a millisecond,
// how many link to at least one holder's hold span (blocked_by), and how
// much of their waiting the linked hold spans cover (the union of each
// linked hold's overlap with the wait, from the spans' own times).
//
// Starved is the part of the waiting in which no hold span at all covered
// the wait (the lock was free: a release on its way to Redis, a waiter
// waking, its acquisition on the way) and the starvation probe
// (redistest.LagProbe) saw this process or redis-server not run: the
// scheduler's time, not dsync's. It is left out of the waiting the fraction is taken of. On an
// idle machine it is nothing or next to it; in make test with both CPUs
// kept busy (two `yes` loops) a Semaphore 1x6 row covered 89.2% of its
// waiting (026ba6a, 2026-12-04).
type blockStats struct {
	waited, linked         int
	wait, covered, starved time.Duration
}

func (s blockStats) linkedFrac() float64 { return float64(s.linked) / float64(max(s.waited, 1)) }
func (s blockStats) coveredFrac() float64 {
	return float64(s.covered) / float64(max(s.wait-s.starved, 1))
}

func (s blockStats) String() string {
	return fmt.Sprintf("%d of %d waits over 1 ms linked (%.1f%%), linked holds cover %v of %v waiting (%.1f%%; %v of the waiting the lock was free and this process or Redis starved, left out)",
		s.linked, s.waited, 100*s.linkedFrac(), s.covered.Round(time.Millisecond), s.wait.Round(time.Millisecond), 100*s.coveredFrac(), s.starved.Round(time.Millisecond))
}

// starvedIn is how much of [s, e] outside every interval of holds is
// inside a lag span (both lists clipped to [s, e]).
func starvedIn(s, e time.Time, holds, lags [][2]time.Time) time.Duration {
	var d time.Duration
	for _, l := range lags {
		a, b := maxTime(l[0], s), minTime(l[1], e)
		if !b.After(a) {
			continue
		}
		// [a, b] less the holds' intervals.
		free := [][2]time.Time{{a, b}}
		for _, h := range holds {
			var next [][2]time.Time
			for _, f := range free {
				if !h[0].Before(f[1]) || !h[1].After(f[0]) {
					next = append(next, f)
					continue
				}
				if h[0].After(f[0]) {
					next = append(next, [2]time.Time{f[0], h[0]})
				}
				if h[1].Before(f[1]) {
					next = append(next, [2]time.Time{h[1], f[1]})
				}
			}
			free = next
		}
		for _, f := range free {
			d += f[1].Sub(f[0])
		}
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// blockedStats reads blockStats from spans: the acquire spans called
// acquire (those that waited and got the lock, mode "" for any), and every
// hold span, by span ID.
func blockedStats(spans []sdktrace.ReadOnlySpan, acquire, mode string, lags [][2]time.Time) blockStats {
	type iv struct{ s, e time.Time }
	holds := map[trace.SpanID]iv{}
	var all [][2]time.Time // every hold span
	for _, s := range spans {
		holds[s.SpanContext().SpanID()] = iv{s.StartTime(), s.EndTime()}
		if strings.HasSuffix(s.Name(), ".hold") {
			all = append(all, [2]time.Time{s.StartTime(), s.EndTime()})
		}
	}
	var st blockStats
	for _, s := range spans {
		if s.Name() != acquire {
			continue
		}
		if v, _ := attrOf(s, "dsync.lock.outcome"); v.Emit() != "acquired" {
			continue
		}
		if v, _ := attrOf(s, "dsync.lock.mode"); mode != "" && v.Emit() != mode {
			continue
		}
		d := s.EndTime().Sub(s.StartTime())
		if d <= time.Millisecond {
			continue
		}
		st.waited++
		st.wait += d
		var ivs []iv
		for _, l := range s.Links() {
			if !isBlockedBy(l) {
				continue
			}
			if h, ok := holds[l.SpanContext.SpanID()]; ok {
				a, b := h.s, h.e
				if a.Before(s.StartTime()) {
					a = s.StartTime()
				}
				if b.IsZero() || b.After(s.EndTime()) {
					b = s.EndTime()
				}
				if b.After(a) {
					ivs = append(ivs, iv{a, b})
				}
			}
		}
		if hasBlockedBy(s) {
			st.linked++
		}
		st.covered += union(ivs, func(x iv) (time.Time, time.Time) { return x.s, x.e })
		st.starved += starvedIn(s.StartTime(), s.EndTime(), all, lags)
	}
	return st
}

func isBlockedBy(l sdktrace.Link) bool {
	for _, a := range l.Attributes {
		if a.Key == "dsync.lock.blocked_by" {
			return true
		}
	}
	return false
}

func hasBlockedBy(s sdktrace.ReadOnlySpan) bool {
	for _, l := range s.Links() {
		if isBlockedBy(l) {
			return true
		}
	}
	return false
}

// union is the total length of the intervals of xs.
func union[T any](xs []T, iv func(T) (time.Time, time.Time)) time.Duration {
	type p struct{ s, e time.Time }
	ps := make([]p, 0, len(xs))
	for _, x := range xs {
		s, e := iv(x)
		ps = append(ps, p{s, e})
	}
	// Insertion sort: a wait links to few holds.
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].s.Before(ps[j-1].s); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	var total time.Duration
	var cur p
	for i, x := range ps {
		if i == 0 || x.s.After(cur.e) {
			total += cur.e.Sub(cur.s)
			cur = x
			continue
		}
		if x.e.After(cur.e) {
			cur.e = x.e
		}
	}
	return total + cur.e.Sub(cur.s)
}

// contender is one kind's acquire and release, for contend.
type contender struct {
	lock   func(ctx context.Context) (context.Context, error)
	unlock func(lctx context.Context) error
}

// contenders are the kinds the fractions are asserted for, each made on a
// Client: name -> (contender, acquire span name, mode of the waits counted).
var contenders = []struct {
	name, span, mode string
	mk               func(c *dsync.Client, g int) contender
}{
	{"mutex", "dsync.mutex.acquire", "", func(c *dsync.Client, _ int) contender {
		m := c.NewMutex("hot")
		return contender{m.LockContext, m.UnlockContext}
	}},
	{"fair", "dsync.fair_mutex.acquire", "", func(c *dsync.Client, _ int) contender {
		m := c.NewFairMutex("hot")
		return contender{m.LockContext, m.UnlockContext}
	}},
	// Writers and readers (one goroutine in three reads): the writers'
	// waits are counted.
	{"rw", "dsync.rw_mutex.acquire", "write", func(c *dsync.Client, g int) contender {
		m := c.NewRWMutex("hot")
		if g%3 == 2 {
			return contender{m.RLockContext, m.RUnlockContext}
		}
		return contender{m.LockContext, m.UnlockContext}
	}},
	{"semaphore", "dsync.semaphore.acquire", "", func(c *dsync.Client, _ int) contender {
		s := c.NewSemaphore("hot", 1)
		return contender{func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 1) },
			func(ctx context.Context) error { return s.Release(ctx, 1) }}
	}},
}

// contend runs clients Clients of goroutines goroutines each, rounds
// critical sections of hold each, on the lock mk makes, traced into tel.
func contend(t *testing.T, tel *telemetry, clients, goroutines, rounds int, hold time.Duration, mk func(c *dsync.Client, g int) contender, opts ...dsyncotel.Option) {
	s := server(t)
	prefix := newPrefix()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	ks := make([][]contender, clients)
	for i := range ks {
		c := client(t, s, prefix, tel.observer(opts...))
		for g := range goroutines {
			ks[i] = append(ks[i], mk(c, g))
		}
		// A warm-up: connections, scripts and subscriptions made, so that
		// no wait is the first call's (waiting for nobody).
		for _, k := range ks[i] {
			l, err := k.lock(ctx)
			require.NoError(t, err)
			require.NoError(t, k.unlock(l))
		}
	}
	tel.spans.Reset()
	probe, err := redistest.StartLagProbe(s.Addr)
	require.NoError(t, err)
	defer func() { tel.lags = probe.End() }()
	for i := range ks {
		for _, k := range ks[i] {
			wg.Go(func() {
				for range rounds {
					l, err := k.lock(ctx)
					if err != nil {
						errs <- err
						return
					}
					time.Sleep(hold)
					if err := k.unlock(l); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestBlockedByFractions: under contention, in one Client (goroutines
// queued behind each other) and across Clients, every kind's waits link
// to the holds they waited behind: at least 95% of the acquisitions that
// waited over 1 ms carry a blocked_by link, and the linked hold spans
// cover at least 90% of the waiting (counted from the spans, not from the
// links' own attribute).
func TestBlockedByFractions(t *testing.T) {
	for _, k := range contenders {
		for _, shape := range []struct{ clients, g int }{{1, 6}, {3, 3}} {
			if k.name == "rw" && shape.clients == 1 {
				continue // (below: the writers of three Clients)
			}
			t.Run(fmt.Sprintf("%s-%dx%d", k.name, shape.clients, shape.g), func(t *testing.T) {
				tel := newTelemetry(t)
				contend(t, tel, shape.clients, shape.g, 6, 2*time.Millisecond, k.mk)
				st := blockedStats(tel.spans.Ended(), k.span, k.mode, tel.lags)
				t.Logf("%s %dx%d: %v", k.name, shape.clients, shape.g, st)
				require.Positive(t, st.waited, "no acquisition waited over 1 ms: nothing was checked")
				assert.GreaterOrEqual(t, st.linkedFrac(), 0.95, "waits with a blocked_by link: %v", st)
				assert.GreaterOrEqual(t, st.coveredFrac(), 0.90, "waiting covered by the linked holds: %v", st)
			})
		}
	}
}

// dsync.lock.waiters counts every waiter of the process: 7 goroutines of
// the holder's Client (queued inside it) and 3 of another Client make 10.
func TestWaitersMetricCountsHolderClient(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	prefix := newPrefix()
	holder := client(t, s, prefix, tel.observer())
	other := client(t, s, prefix, tel.observer())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := holder.NewMutex("ten").LockContext(ctx)
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 10 {
		c := holder
		if i >= 7 {
			c = other
		}
		wg.Go(func() { _, _ = c.NewMutex("ten").LockContext(wctx) })
	}
	waitFor(t, 10*time.Second, "10 waiters in dsync.lock.waiters", func() bool {
		v, _ := tel.value(t, "dsync.lock.waiters")
		return v == 10
	})
	wcancel()
	wg.Wait()
	tel.mustValue(t, "dsync.lock.waiters", 0)
	require.NoError(t, holder.NewMutex("ten").UnlockContext(held))
}

// With WithBackgroundSpans, the spans are ended by the observer's own
// goroutine at the times the hooks took: every acquisition's and hold's
// span ends, and the waits link to their holders as in the hooks (the
// fractions of TestBlockedByFractions, Mutex, one Client and three).
func TestBackgroundSpans(t *testing.T) {
	for _, shape := range []struct{ clients, g int }{{1, 6}, {3, 3}} {
		t.Run(fmt.Sprintf("mutex-%dx%d", shape.clients, shape.g), func(t *testing.T) {
			tel := newTelemetry(t)
			const rounds = 6
			contend(t, tel, shape.clients, shape.g, rounds, 2*time.Millisecond, contenders[0].mk, dsyncotel.WithBackgroundSpans(0))
			n := shape.clients * shape.g * rounds
			count := func(name string) int {
				k := 0
				for _, s := range tel.spans.Ended() {
					if s.Name() == name {
						k++
					}
				}
				return k
			}
			// The queue drains after the last release's hook returned.
			deadline := time.Now().Add(10 * time.Second)
			for count("dsync.mutex.hold") < n || count("dsync.mutex.acquire") < n {
				require.True(t, time.Now().Before(deadline), "spans ended: %d acquire, %d hold, want %d", count("dsync.mutex.acquire"), count("dsync.mutex.hold"), n)
				time.Sleep(time.Millisecond)
			}
			st := blockedStats(tel.spans.Ended(), "dsync.mutex.acquire", "", tel.lags)
			t.Logf("background %dx%d: %v", shape.clients, shape.g, st)
			require.Positive(t, st.waited, "no acquisition waited over 1 ms: nothing was checked")
			assert.GreaterOrEqual(t, st.linkedFrac(), 0.95, "waits with a blocked_by link: %v", st)
			assert.GreaterOrEqual(t, st.coveredFrac(), 0.90, "waiting covered by the linked holds: %v", st)
		})
	}
}
