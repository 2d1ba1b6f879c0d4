package dsyncotel_test

import (
	"context"
	"testing"

	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// nopProcessor is a span processor that keeps nothing: the SDK's own
// cost, without an exporter's.
type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkContended16 is the bench's contended scenario in small: 16
// goroutines of one Client on one Mutex, zero-length holds, with tracing
// off and on (every span sampled, dropped by the processor; the spans
// ended in the hooks, and in the background: WithBackgroundSpans; and one
// trace in 10 sampled, TraceIDRatioBased(0.1), spans ended in the hooks),
// to profile what tracing puts on the lock's critical path.
func BenchmarkContended16(b *testing.B) {
	for _, mode := range []string{"off", "traced", "traced-bg", "traced-10pct"} {
		traced := mode != "off"
		b.Run(mode, func(b *testing.B) {
			s := server(b)
			var opts []dsync.Option
			var tp *sdktrace.TracerProvider
			if traced {
				sampler := sdktrace.AlwaysSample()
				if mode == "traced-10pct" {
					sampler = sdktrace.TraceIDRatioBased(0.1)
				}
				tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(nopProcessor{}), sdktrace.WithSampler(sampler))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				oo := []dsyncotel.Option{dsyncotel.WithTracerProvider(tp)}
				if mode == "traced-bg" {
					oo = append(oo, dsyncotel.WithBackgroundSpans(0))
				}
				opts = append(opts, dsync.WithObserver(dsyncotel.NewObserver(oo...)))
			}
			opts = append(opts, dsync.WithKeyPrefix(newPrefix()))
			c, err := dsync.NewClient(s.Client(b), opts...)
			require.NoError(b, err)
			b.Cleanup(func() { c.Close() })
			m := c.NewMutex("contended")
			b.SetParallelism(8) // 8 x GOMAXPROCS(2) = 16 goroutines
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					lctx, err := m.LockContext(ctx)
					if !assert.NoError(b, err) {
						return
					}
					if !assert.NoError(b, m.UnlockContext(lctx)) {
						return
					}
				}
			})
		})
	}
}
