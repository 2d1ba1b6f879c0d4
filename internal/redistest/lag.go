package redistest

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// A LagProbe records the stretches in which the test process or the
// server at its address was not run (the scheduler's time, with both CPUs
// busy): a goroutine sleeps 1 ms in a loop, and each time it wakes a
// millisecond or more late, [when it was due, when it ran] is a lag span;
// another sends PING in a loop, and each PING whose reply takes a
// millisecond or more (on an idle machine: 30-100 µs) is one, [sent,
// replied]. Tests weigh a time bound against it: what exceeds the bound
// is excused only by lag measured within the very stretch (Within).
type LagProbe struct {
	mu    sync.Mutex
	spans [][2]time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// StartLagProbe starts a probe of this process and of the server at addr;
// End stops it.
func StartLagProbe(addr string) (*LagProbe, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	p := &LagProbe{stop: make(chan struct{})}
	add := func(a, b time.Time) {
		if b.Sub(a) >= time.Millisecond {
			p.mu.Lock()
			p.spans = append(p.spans, [2]time.Time{a, b})
			p.mu.Unlock()
		}
	}
	stopped := func() bool {
		select {
		case <-p.stop:
			return true
		default:
			return false
		}
	}
	p.wg.Go(func() {
		for !stopped() {
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			add(t0.Add(time.Millisecond), time.Now())
		}
	})
	p.wg.Go(func() {
		defer rc.Close()
		for !stopped() {
			t0 := time.Now()
			if rc.Do(context.Background(), rc.B().Ping().Build()).Error() == nil {
				add(t0, time.Now())
			}
			time.Sleep(time.Millisecond)
		}
	})
	return p, nil
}

// End stops the probe and returns its lag spans.
func (p *LagProbe) End() [][2]time.Time {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spans
}

// Spans returns the lag spans recorded so far.
func (p *LagProbe) Spans() [][2]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][2]time.Time(nil), p.spans...)
}

// Within is how long, within [from, to], at least one lag span lasted
// (their union, clipped).
func Within(from, to time.Time, spans [][2]time.Time) time.Duration {
	var d time.Duration
	at := from
	sorted := append([][2]time.Time(nil), spans...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j][0].Before(sorted[j-1][0]); j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	for _, s := range sorted {
		a, b := s[0], s[1]
		if a.Before(at) {
			a = at
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
			at = b
		}
	}
	return d
}
