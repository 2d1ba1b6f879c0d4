package main

import (
	"strings"
	"testing"
	"time"

	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestContention runs the example small and checks that the report
// accounts for every critical section.
func TestContention(t *testing.T) {
	var b strings.Builder
	reps, err := run(&b, 6, 8)
	require.NoError(t, err)
	t.Log("\n" + b.String())
	n := 0
	for _, r := range reps {
		n += len(r.waits)
		assert.LessOrEqual(t, r.p50, r.p99, "%s: p50 %v p99 %v max %v total %v out of order", r.name, r.p50, r.p99, r.max, r.total)
		assert.LessOrEqual(t, r.p99, r.max, "%s: p50 %v p99 %v max %v total %v out of order", r.name, r.p50, r.p99, r.max, r.total)
		assert.LessOrEqual(t, r.max, r.total, "%s: p50 %v p99 %v max %v total %v out of order", r.name, r.p50, r.p99, r.max, r.total)
		var sum time.Duration
		for _, w := range r.top {
			assert.True(t, strings.HasPrefix(w.id, "worker-"), "%s: waiter %q is not a worker: parent spans were lost", r.name, w.id)
			sum += w.wait
		}
		assert.Equal(t, r.total, sum, "%s: waiters add up to the total", r.name)
		assert.Contains(t, b.String(), "\n"+r.name+" ", "%s missing from the printed report", r.name)
	}
	assert.Equal(t, 6*8, n, "report counts acquisitions")
}

// TestAnalyse checks the arithmetic on spans made by hand.
func TestAnalyse(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var spans tracetest.SpanStubs
	sid := byte(0)
	span := func(name string, parent trace.SpanID, d time.Duration, attrs ...attribute.KeyValue) trace.SpanID {
		sid++
		id := trace.SpanID{sid}
		spans = append(spans, tracetest.SpanStub{
			Name:        name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: id}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: parent}),
			StartTime:   t0, EndTime: t0.Add(d), Attributes: attrs,
		})
		return id
	}
	acquire := func(worker trace.SpanID, lock string, d time.Duration, outcome string) {
		span("dsync.mutex.acquire", worker, d, dsyncotel.KeyName.String(lock), dsyncotel.KeyOutcome.String(outcome))
	}
	a := span("work", trace.SpanID{}, time.Second, workerKey.String("worker-a"))
	b := span("work", trace.SpanID{}, time.Second, workerKey.String("worker-b"))
	for i := 1; i <= 4; i++ {
		acquire(a, "x", time.Duration(i)*time.Millisecond, "acquired")
	}
	acquire(b, "x", 12*time.Millisecond, "acquired")
	acquire(b, "x", time.Hour, "cancelled") // not a wait that got the lock
	acquire(b, "y", time.Millisecond, "acquired")

	reps := analyse(spans)
	require.Len(t, reps, 2, "reports = %+v", reps)
	require.Equal(t, "x", reps[0].name, "reports = %+v", reps)
	require.Equal(t, "y", reps[1].name, "reports = %+v", reps)
	x := reps[0]
	assert.Len(t, x.waits, 5, "x = %+v", x)
	assert.Equal(t, 3*time.Millisecond, x.p50, "x = %+v", x)
	assert.Equal(t, 12*time.Millisecond, x.p99, "x = %+v", x)
	assert.Equal(t, 12*time.Millisecond, x.max, "x = %+v", x)
	assert.Equal(t, 22*time.Millisecond, x.total, "x = %+v", x)
	if assert.Len(t, x.top, 2, "top waiters = %v", x.top) {
		assert.Equal(t, waiter{"worker-b", 12 * time.Millisecond}, x.top[0], "top waiters = %v", x.top)
		assert.Equal(t, waiter{"worker-a", 10 * time.Millisecond}, x.top[1], "top waiters = %v", x.top)
	}
}
