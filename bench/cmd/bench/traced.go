package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracedSpec is the Mutex with tracing on (issue 37): dsyncotel's observer
// on an SDK tracer provider that samples every span and keeps, in memory,
// what the blocked-by fractions need (spanLog). It runs beside dsync in the
// serial, contended and cross-process scenarios, so that the report can
// set the cost of tracing (commands per uncontended cycle, contended
// throughput) against tracing off, and count how many of the waits link
// to the holds they waited behind.
var tracedSpec = libSpec{name: "dsync-traced", note: "dsync Mutex, default options, traced: dsyncotel observer, every span sampled (serial, contended and xproc only)", lock: true,
	open: openTraced}

type tracedLib struct {
	*dsyncLib
	log  *spanLog
	tp   *sdktrace.TracerProvider
	once sync.Once
}

func openTraced(addr string, rt *atomic.Int64) (lib, error) {
	log := &spanLog{holds: map[string][2]int64{}, own: map[string][2]int64{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(log), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	l, err := newDsync(addr, rt, false, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs),
		dsync.WithObserver(dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp))))
	if err != nil {
		return nil, err
	}
	return &tracedLib{dsyncLib: l, log: log, tp: tp}, nil
}

func (l *tracedLib) close() {
	l.once.Do(func() {
		l.dsyncLib.close()
		_ = l.tp.Shutdown(context.Background())
	})
}

// spans returns what the spans of this lib recorded (after close, so that
// every hold span has ended).
func (l *tracedLib) spans() *spanDump { return l.log.dump() }

// spanLog is a span processor that keeps, of a dsync observer's spans,
// every hold span's interval (by span ID) and each acquisition that got
// the lock after waiting over a millisecond, with the holds it links to
// as blocked by.
type spanLog struct {
	mu    sync.Mutex
	holds map[string][2]int64
	own   map[string][2]int64 // hold intervals by their acquire span's ID
	waits []waitSpan
}

// waitSpan is an acquire span that waited: its interval (Unix ns) and the
// span IDs of its blocked_by links.
type waitSpan struct {
	ID    string `json:",omitempty"`
	S, E  int64
	Links []string `json:",omitempty"`
}

// spanDump is a spanLog's content, sent by an xproc child.
type spanDump struct {
	Holds map[string][2]int64 `json:"holds"`
	Own   map[string][2]int64 `json:"own,omitempty"` // by acquire span ID
	Waits []waitSpan          `json:"waits"`
}

func (p *spanLog) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *spanLog) Shutdown(context.Context) error                  { return nil }
func (p *spanLog) ForceFlush(context.Context) error                { return nil }

func (p *spanLog) OnEnd(s sdktrace.ReadOnlySpan) {
	name := s.Name()
	iv := [2]int64{s.StartTime().UnixNano(), s.EndTime().UnixNano()}
	switch {
	case strings.HasSuffix(name, ".hold"):
		p.mu.Lock()
		p.holds[s.SpanContext().SpanID().String()] = iv
		if ls := s.Links(); len(ls) > 0 {
			// The hold span's one link is to its acquisition's span.
			p.own[ls[0].SpanContext.SpanID().String()] = iv
		}
		p.mu.Unlock()
	case strings.HasSuffix(name, ".acquire"):
		if iv[1]-iv[0] <= int64(time.Millisecond) {
			return
		}
		acquired := false
		for _, a := range s.Attributes() {
			if a.Key == dsyncotel.KeyOutcome && a.Value.AsString() == dsyncotel.OutcomeAcquired {
				acquired = true
			}
		}
		if !acquired {
			return
		}
		w := waitSpan{ID: s.SpanContext().SpanID().String(), S: iv[0], E: iv[1]}
		for _, l := range s.Links() {
			for _, a := range l.Attributes {
				if a.Key == dsyncotel.KeyLinkBlockedBy {
					w.Links = append(w.Links, l.SpanContext.SpanID().String())
					break
				}
			}
		}
		p.mu.Lock()
		p.waits = append(p.waits, w)
		p.mu.Unlock()
	}
}

func (p *spanLog) dump() *spanDump {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &spanDump{Holds: p.holds, Own: p.own, Waits: p.waits}
}

// merge adds o's spans to d (the processes of an xproc run).
func (d *spanDump) merge(o *spanDump) *spanDump {
	if d == nil {
		d = &spanDump{Holds: map[string][2]int64{}, Own: map[string][2]int64{}}
	}
	if o == nil {
		return d
	}
	for k, v := range o.Holds {
		d.Holds[k] = v
	}
	if d.Own == nil {
		d.Own = map[string][2]int64{}
	}
	for k, v := range o.Own {
		d.Own[k] = v
	}
	d.Waits = append(d.Waits, o.Waits...)
	return d
}

// figures are the figures of issue 37's done-means from the spans:
// the acquisitions that waited over 1 ms (waited_1ms), the fraction of
// them with at least one blocked_by link (linked_frac), and the fraction
// of their waiting that the linked hold spans cover (covered_frac: the
// union of each linked hold's overlap with the wait, from the hold spans'
// own times, which every process records on the one machine's clock).
//
// The rest of the waiting, the part no linked hold covers, is broken down
// in this order (each a fraction of the waiting):
//   - own_frac: covered by the waiter's own hold span: the lock was its
//     already (handed to it, or granted), the acquisition not yet over
//     (its goroutine waking, its AcquireDone);
//   - unlinked_frac: covered by hold spans the wait does not link to;
//   - free_frac: covered by no hold span at all: the lock was free
//     between holds (a release's trip to Redis, the waiters' wake-up and
//     acquisition), or the hold spans' times miss the holds' true ends
//     (free_gaps_per_wait and free_gap_us_p50 say how many such stretches
//     and how long: a timestamp mismatch shows as many short ones).
func (d *spanDump) figures() sample {
	var waited, linked int
	var wait, covered, own, unlinked int64
	all := make([]interval, 0, len(d.Holds))
	var maxLen int64
	for _, h := range d.Holds {
		all = append(all, interval{h[0], h[1]})
		maxLen = max(maxLen, h[1]-h[0])
	}
	slices.SortFunc(all, func(a, b interval) int { return cmpInt(a[0], b[0]) })
	var gaps []int64
	for _, w := range d.Waits {
		waited++
		wait += w.E - w.S
		if len(w.Links) > 0 {
			linked++
		}
		var ivs []interval
		for _, id := range w.Links {
			if h, ok := d.Holds[id]; ok {
				ivs = append(ivs, interval{h[0], h[1]})
			}
		}
		cl := unionIn(ivs, w.S, w.E, nil)
		covered += cl
		if h, ok := d.Own[w.ID]; ok {
			ivs = append(ivs, interval{h[0], h[1]})
		}
		co := unionIn(ivs, w.S, w.E, nil)
		own += co - cl
		// Every hold span that overlaps the wait.
		lo, _ := slices.BinarySearchFunc(all, w.S-maxLen, func(a interval, t int64) int { return cmpInt(a[0], t) })
		for _, h := range all[lo:] {
			if h[0] >= w.E {
				break
			}
			if h[1] > w.S {
				ivs = append(ivs, h)
			}
		}
		var g []int64
		ca := unionIn(ivs, w.S, w.E, &g)
		unlinked += ca - co
		gaps = append(gaps, g...)
	}
	s := sample{"waited_1ms": float64(waited)}
	if waited > 0 {
		s["linked_frac"] = float64(linked) / float64(waited)
		s["covered_frac"] = float64(covered) / float64(wait)
		s["own_frac"] = float64(own) / float64(wait)
		s["unlinked_frac"] = float64(unlinked) / float64(wait)
		s["free_frac"] = 1 - float64(covered+own+unlinked)/float64(wait)
		s["free_gaps_per_wait"] = float64(len(gaps)) / float64(waited)
		if len(gaps) > 0 {
			slices.Sort(gaps)
			s["free_gap_us_p50"] = float64(gaps[len(gaps)/2]) / 1e3
		}
	}
	return s
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// unionIn is the length of the union of ivs within [s, e]; with gaps, the
// stretches of [s, e] they leave uncovered are appended to *gaps.
func unionIn(ivs []interval, s, e int64, gaps *[]int64) int64 {
	var cut []interval
	for _, x := range ivs {
		a, b := max(x[0], s), min(x[1], e)
		if b > a {
			cut = append(cut, interval{a, b})
		}
	}
	slices.SortFunc(cut, func(a, b interval) int { return cmpInt(a[0], b[0]) })
	var total int64
	at := s // covered up to
	for _, x := range cut {
		if x[0] > at && gaps != nil {
			*gaps = append(*gaps, x[0]-at)
		}
		if x[1] > at {
			total += x[1] - max(x[0], at)
			at = x[1]
		}
	}
	if at < e && gaps != nil {
		*gaps = append(*gaps, e-at)
	}
	return total
}
