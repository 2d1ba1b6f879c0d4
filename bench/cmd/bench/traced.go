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
	log := &spanLog{holds: map[string][2]int64{}}
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
	waits []waitSpan
}

// waitSpan is an acquire span that waited: its interval (Unix ns) and the
// span IDs of its blocked_by links.
type waitSpan struct {
	S, E  int64
	Links []string `json:",omitempty"`
}

// spanDump is a spanLog's content, sent by an xproc child.
type spanDump struct {
	Holds map[string][2]int64 `json:"holds"`
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
		w := waitSpan{S: iv[0], E: iv[1]}
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
	return &spanDump{Holds: p.holds, Waits: p.waits}
}

// merge adds o's spans to d (the processes of an xproc run).
func (d *spanDump) merge(o *spanDump) *spanDump {
	if d == nil {
		d = &spanDump{Holds: map[string][2]int64{}}
	}
	if o == nil {
		return d
	}
	for k, v := range o.Holds {
		d.Holds[k] = v
	}
	d.Waits = append(d.Waits, o.Waits...)
	return d
}

// blockedFigures are the figures of issue 37's done-means from the spans:
// the acquisitions that waited over 1 ms (waited_1ms), the fraction of
// them with at least one blocked_by link (linked_frac), and the fraction
// of their waiting that the linked hold spans cover (covered_frac: the
// union of each linked hold's overlap with the wait, from the hold spans'
// own times, which every process records on the one machine's clock).
func (d *spanDump) figures() sample {
	var waited, linked int
	var wait, covered int64
	for _, w := range d.Waits {
		waited++
		wait += w.E - w.S
		if len(w.Links) > 0 {
			linked++
		}
		var ivs []interval
		for _, id := range w.Links {
			if h, ok := d.Holds[id]; ok {
				a, b := max(h[0], w.S), min(h[1], w.E)
				if b > a {
					ivs = append(ivs, interval{a, b})
				}
			}
		}
		slices.SortFunc(ivs, func(a, b interval) int { return int(a[0] - b[0]) })
		var cur interval
		for i, x := range ivs {
			if i == 0 || x[0] > cur[1] {
				covered += cur[1] - cur[0]
				cur = x
				continue
			}
			cur[1] = max(cur[1], x[1])
		}
		covered += cur[1] - cur[0]
	}
	s := sample{"waited_1ms": float64(waited)}
	if waited > 0 {
		s["linked_frac"] = float64(linked) / float64(waited)
		s["covered_frac"] = float64(covered) / float64(wait)
	}
	return s
}
