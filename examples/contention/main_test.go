package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestContention runs the example small and checks that the report
// accounts for every critical section, that waits were traced to their
// blockers through the blocked-by links, and that the blame adds up.
func TestContention(t *testing.T) {
	var b strings.Builder
	reps, err := run(&b, 6, 8)
	require.NoError(t, err)
	t.Log("\n" + b.String())
	acq, waited := 0, 0
	who := regexp.MustCompile(`^worker-[0-5] \(client-[01]\)$`)
	for _, r := range reps {
		acq += r.acq
		waited += r.waited
		assert.LessOrEqual(t, r.waited, r.acq, "%s: more waits than acquisitions", r.name)
		assert.LessOrEqual(t, r.max, r.total, "%s: max %v total %v out of order", r.name, r.max, r.total)
		var sum time.Duration
		for _, bl := range r.blocker {
			assert.Regexp(t, who, bl.id, "%s: blocker %q is not a worker of a Client: the link's hold span or its parent was lost", r.name, bl.id)
			sum += bl.caused
		}
		// Each wait is split among its blockers in whole nanoseconds.
		assert.InDelta(t, r.total, sum, float64(r.waited), "%s: the wait caused adds up to the total", r.name)
		if r.waited > 0 {
			assert.NotEmpty(t, r.blocker, "%s: waits without blockers", r.name)
		}
		assert.Contains(t, b.String(), "\n"+r.name+" ", "%s missing from the printed report", r.name)
	}
	assert.Equal(t, 6*8, acq, "report counts acquisitions")
	assert.Positive(t, waited, "no wait was linked to a holder: 6 workers on 3 locks must contend")
}

// TestAnalyse checks the reading of the links and the arithmetic on spans
// made by hand.
func TestAnalyse(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var spans tracetest.SpanStubs
	sid := byte(0)
	span := func(name string, parent trace.SpanID, d time.Duration, links []trace.SpanID, attrs ...attribute.KeyValue) trace.SpanID {
		sid++
		id := trace.SpanID{sid}
		var ls []sdktrace.Link
		for _, l := range links {
			ls = append(ls, sdktrace.Link{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: l}),
				Attributes:  []attribute.KeyValue{dsyncotel.KeyLinkBlockedBy.Bool(true)},
			})
		}
		spans = append(spans, tracetest.SpanStub{
			Name:        name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: id}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: parent}),
			StartTime:   t0, EndTime: t0.Add(d), Attributes: attrs, Links: ls,
		})
		return id
	}
	acquire := func(worker trace.SpanID, lock string, d time.Duration, outcome string, blockedBy ...trace.SpanID) {
		span("dsync.mutex.acquire", worker, d, blockedBy, dsyncotel.KeyName.String(lock), dsyncotel.KeyOutcome.String(outcome))
	}
	hold := func(worker trace.SpanID, lock, client string) trace.SpanID {
		return span("dsync.mutex.hold", worker, time.Second, nil, dsyncotel.KeyName.String(lock), dsyncotel.KeyOwner.String(client+"/ab12"))
	}
	a := span("work", trace.SpanID{}, time.Second, nil, workerKey.String("worker-a"))
	b := span("work", trace.SpanID{}, time.Second, nil, workerKey.String("worker-b"))
	c := span("work", trace.SpanID{}, time.Second, nil, workerKey.String("worker-c"))
	ha, hb, hc := hold(a, "x", "client-0"), hold(b, "x", "client-1"), hold(c, "y", "client-0")
	acquire(a, "x", time.Millisecond, "acquired")                   // did not wait
	acquire(b, "x", 4*time.Millisecond, "acquired", ha)             // waited for a
	acquire(c, "x", 6*time.Millisecond, "acquired", ha, hb)         // for two readers, say
	acquire(c, "x", time.Hour, "cancelled", hb)                     // not a wait that got the lock
	acquire(a, "y", 2*time.Millisecond, "acquired", hc)             // waited for c
	acquire(b, "y", time.Millisecond, "acquired", trace.SpanID{99}) // a link outside the trace

	reps := analyse(spans)
	require.Len(t, reps, 2, "reports = %+v", reps)
	x, y := reps[0], reps[1]
	require.Equal(t, "x", x.name, "reports = %+v", reps)
	require.Equal(t, "y", y.name, "reports = %+v", reps)
	assert.Equal(t, 3, x.acq, "x = %+v", x)
	assert.Equal(t, 2, x.waited, "x = %+v", x)
	assert.Equal(t, 10*time.Millisecond, x.total, "x = %+v", x)
	assert.Equal(t, 6*time.Millisecond, x.max, "x = %+v", x)
	assert.Equal(t, []blocker{{"worker-a (client-0)", 7 * time.Millisecond}, {"worker-b (client-1)", 3 * time.Millisecond}}, x.blocker, "x = %+v", x)
	assert.Equal(t, 2, y.acq, "y = %+v", y)
	assert.Equal(t, 1, y.waited, "y = %+v", y)
	assert.Equal(t, []blocker{{"worker-c (client-0)", 2 * time.Millisecond}}, y.blocker, "y = %+v", y)
}
