package dsyncotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkObserverHooks is the cost the observer adds to one acquisition
// and its release (two spans, five metric updates), without Redis: compare
// it with the round trip an acquisition costs anyway.
func BenchmarkObserverHooks(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	o := dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp), dsyncotel.WithMeterProvider(mp))
	l := dsync.Lock{Kind: dsync.KindMutex, Name: "bench", N: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N {
		octx := o.AcquireStart(ctx, dsync.AcquireStart{Lock: l})
		o.AcquireDone(octx, dsync.AcquireDone{Lock: l, Acquired: true, Wait: time.Millisecond, Attempts: 1, Token: uint64(i + 1), Hold: uint64(i + 1)})
		o.Released(ctx, dsync.Released{Lock: l, Hold: uint64(i + 1), Held: time.Millisecond, Complete: true})
	}
}

// BenchmarkObserverHooksBlocked is BenchmarkObserverHooks for an
// acquisition that waited behind 15 holds (the bench's contended scenario:
// 16 goroutines on one Mutex), with HoldTag: its acquire span carries 15
// blocked_by links. Every span sampled, dropped by the processor; the
// meter is the global (no-op) one, as in BenchmarkContended16.
func BenchmarkObserverHooksBlocked(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(nopProcessor{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	o := dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp))
	l := dsync.Lock{Kind: dsync.KindMutex, Name: "bench", N: 1}
	ctx := context.Background()
	var blockers []dsync.Blocker
	for i := range 15 {
		octx := o.AcquireStart(ctx, dsync.AcquireStart{Lock: l})
		e := dsync.AcquireDone{Lock: l, Acquired: true, Attempts: 1, Token: uint64(i + 1), Hold: uint64(1000 + i)}
		o.AcquireDone(octx, e)
		blockers = append(blockers, dsync.Blocker{Tag: o.HoldTag(octx, e), Start: time.Now(), Overlap: time.Microsecond})
	}
	b.ReportAllocs()
	for i := range b.N {
		octx := o.AcquireStart(ctx, dsync.AcquireStart{Lock: l})
		e := dsync.AcquireDone{Lock: l, Acquired: true, Wait: time.Millisecond, Attempts: 1, Token: uint64(i + 1), Hold: uint64(i + 1), Blockers: blockers}
		o.AcquireDone(octx, e)
		o.HoldTag(octx, e)
		o.Released(ctx, dsync.Released{Lock: l, Hold: uint64(i + 1), Held: time.Millisecond, Complete: true})
	}
}
