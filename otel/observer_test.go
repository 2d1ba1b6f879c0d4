package dsyncotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

var prefixSeq atomic.Int64

// telemetry is an in-memory trace and metric pipeline.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	// lags: the starvation probe's spans of the last contend run.
	lags [][2]time.Time
}

func newTelemetry(t *testing.T) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) observer(opts ...dsyncotel.Option) dsync.Observer {
	opts = append([]dsyncotel.Option{dsyncotel.WithTracerProvider(tel.tp), dsyncotel.WithMeterProvider(tel.mp)}, opts...)
	return dsyncotel.NewObserver(opts...)
}

// client returns a Client on s whose events go to its own observer.
func client(t *testing.T, s *redistest.Server, prefix string, o dsync.Observer, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	opts = append([]dsync.Option{dsync.WithKeyPrefix(prefix), dsync.WithObserver(o)}, opts...)
	c, err := dsync.NewClient(s.Client(t), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func newPrefix() string { return fmt.Sprintf("otel%d-%d", os.Getpid(), prefixSeq.Add(1)) }

// value returns the data points of the named metric whose attributes
// include every one of want, summed: the count for a histogram, the value
// for a sum.
func (tel *telemetry) value(t *testing.T, name string, want ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	found := false
	var v float64
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if got, ok := set.Value(kv.Key); !ok || got != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, dsyncotel.ScopeName, sm.Scope.Name, "scope")
		require.Equal(t, dsyncotel.Version, sm.Scope.Version, "scope")
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			found = true
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						v += float64(p.Value)
					}
				}
			case metricdata.Histogram[float64]:
				assert.Equal(t, "s", m.Unit, "%s unit", name)
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						v += float64(p.Count)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return v, found
}

func (tel *telemetry) mustValue(t *testing.T, name string, want float64, attrs ...attribute.KeyValue) {
	t.Helper()
	v, _ := tel.value(t, name, attrs...)
	assert.Equal(t, want, v, "%s%v", name, attrs)
}

// histMin is the smallest recorded value of a histogram with attrs.
func (tel *telemetry) histMin(t *testing.T, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	out := -1.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				ok := true
				for _, kv := range attrs {
					if got, has := p.Attributes.Value(kv.Key); !has || got != kv.Value {
						ok = false
					}
				}
				if mn, has := p.Min.Value(); ok && has {
					out = mn
				}
			}
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// spansUnder returns the ended spans named name whose parent is parent.
func (tel *telemetry) spansUnder(parent trace.SpanContext, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name && s.Parent().SpanID() == parent.SpanID() && s.Parent().TraceID() == parent.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out after %v waiting for %s", d, what)
		time.Sleep(2 * time.Millisecond)
	}
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, k attribute.Key, want attribute.Value) {
	t.Helper()
	got, ok := attrOf(s, k)
	if assert.True(t, ok, "span %s: no %s, want %v", s.Name(), k, want.Emit()) {
		assert.Equal(t, want, got, "span %s: %s = %v, want %v", s.Name(), k, got.Emit(), want.Emit())
	}
}

// TestObserverContention scripts a contention scenario over two Clients
// (two "processes") and checks every span and metric it must produce.
func TestObserverContention(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	prefix := newPrefix()
	c1 := client(t, s, prefix, tel.observer(dsyncotel.WithLockNames(true)))
	c2 := client(t, s, prefix, tel.observer(dsyncotel.WithLockNames(true)))
	tracer := tel.tp.Tracer("test")
	base, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ordersName := dsyncotel.KeyName.String("orders")

	// Job A holds "orders" and re-enters it.
	ctxA, jobA := tracer.Start(base, "job-a")
	mA := c1.NewMutex("orders")
	lA, err := mA.LockContext(ctxA)
	require.NoError(t, err)
	_, err = mA.LockContext(lA)
	require.NoError(t, err)

	// Job B, in the other Client, waits for it.
	ctxB, jobB := tracer.Start(base, "job-b")
	mB := c2.NewMutex("orders")
	bDone := make(chan error, 1)
	var lB context.Context
	go func() {
		var err error
		lB, err = mB.LockContext(ctxB)
		bDone <- err
	}()
	waitFor(t, 5*time.Second, "one waiter", func() bool {
		v, _ := tel.value(t, "dsync.lock.waiters", ordersName)
		return v == 1
	})

	// Job C tries once and gives up; job D waits and is cancelled.
	ctxC, jobC := tracer.Start(base, "job-c")
	_, ok, err := mB.TryLockContext(ctxC)
	require.False(t, ok, "TryLockContext while held")
	require.NoError(t, err, "TryLockContext while held")
	jobC.End()
	ctxD, jobD := tracer.Start(base, "job-d")
	ctxD, cancelD := context.WithCancel(ctxD)
	dDone := make(chan error, 1)
	go func() {
		_, err := mB.LockContext(ctxD)
		dDone <- err
	}()
	waitFor(t, 5*time.Second, "two waiters", func() bool {
		v, _ := tel.value(t, "dsync.lock.waiters", ordersName)
		return v == 2
	})
	cancelD()
	require.ErrorIs(t, <-dDone, context.Canceled, "cancelled wait")
	jobD.End()

	time.Sleep(20 * time.Millisecond)        // B's wait is measurably longer than A's hold so far
	require.NoError(t, mA.UnlockContext(lA)) // the re-entry
	released := time.Now()
	require.NoError(t, mA.UnlockContext(lA))
	require.NoError(t, <-bDone)
	require.NoError(t, mB.UnlockContext(lB))
	jobA.End()
	jobB.End()

	// Spans: A's two acquisitions and its hold sit under job-a.
	acqA := tel.spansUnder(jobA.SpanContext(), "dsync.mutex.acquire")
	require.Len(t, acqA, 2, "job-a has acquire spans")
	for i, s := range acqA {
		wantAttr(t, s, dsyncotel.KeyKind, attribute.StringValue("mutex"))
		wantAttr(t, s, dsyncotel.KeyName, attribute.StringValue("orders"))
		wantAttr(t, s, dsyncotel.KeyPermits, attribute.Int64Value(1))
		wantAttr(t, s, dsyncotel.KeyOutcome, attribute.StringValue("acquired"))
		wantAttr(t, s, dsyncotel.KeyReentered, attribute.BoolValue(i == 1))
		wantAttr(t, s, dsyncotel.KeyAttempts, attribute.IntValue([]int{1, 0}[i]))
		_, ok := attrOf(s, dsyncotel.KeyFencingToken)
		assert.True(t, ok, "acquire span %d has no fencing token", i)
	}
	holdA := tel.spansUnder(jobA.SpanContext(), "dsync.mutex.hold")
	require.Len(t, holdA, 1, "job-a has hold spans")
	assert.True(t, hasEvent(holdA[0], "dsync.lock.reentered"), "job-a's hold span events = %v, want the re-entry and its release", holdA[0].Events())
	assert.True(t, hasEvent(holdA[0], "dsync.lock.released"), "job-a's hold span events = %v, want the re-entry and its release", holdA[0].Events())
	assert.NotEqual(t, codes.Error, holdA[0].Status().Code, "a released hold has an error status")

	acqB := tel.spansUnder(jobB.SpanContext(), "dsync.mutex.acquire")
	require.Len(t, acqB, 1, "job-b has acquire spans")
	wantAttr(t, acqB[0], dsyncotel.KeyOutcome, attribute.StringValue("acquired"))
	n, _ := attrOf(acqB[0], dsyncotel.KeyAttempts)
	assert.GreaterOrEqual(t, n.AsInt64(), int64(2), "job-b acquired after waiting attempts")
	assert.False(t, acqB[0].EndTime().Before(released), "job-b's wait ended before job-a released")
	assert.Len(t, tel.spansUnder(jobB.SpanContext(), "dsync.mutex.hold"), 1, "job-b has no hold span")
	tokA, _ := attrOf(acqA[0], dsyncotel.KeyFencingToken)
	tokB, _ := attrOf(acqB[0], dsyncotel.KeyFencingToken)
	assert.Greater(t, tokB.AsInt64(), tokA.AsInt64(), "fencing tokens not increasing in spans")

	acqC := tel.spansUnder(jobC.SpanContext(), "dsync.mutex.acquire")
	require.Len(t, acqC, 1, "job-c has acquire spans")
	wantAttr(t, acqC[0], dsyncotel.KeyOutcome, attribute.StringValue("not_acquired"))
	wantAttr(t, acqC[0], dsyncotel.KeyTry, attribute.BoolValue(true))
	acqD := tel.spansUnder(jobD.SpanContext(), "dsync.mutex.acquire")
	require.Len(t, acqD, 1, "job-d has acquire spans")
	wantAttr(t, acqD[0], dsyncotel.KeyOutcome, attribute.StringValue("cancelled"))
	assert.Equal(t, 0, len(tel.spansUnder(jobC.SpanContext(), "dsync.mutex.hold"))+len(tel.spansUnder(jobD.SpanContext(), "dsync.mutex.hold")), "an acquisition that failed has a hold span")

	// Metrics.
	out := func(s string) attribute.KeyValue { return dsyncotel.KeyOutcome.String(s) }
	tel.mustValue(t, "dsync.lock.acquisitions", 3, ordersName, out("acquired"))
	tel.mustValue(t, "dsync.lock.acquisitions", 1, ordersName, out("not_acquired"))
	tel.mustValue(t, "dsync.lock.acquisitions", 1, ordersName, out("cancelled"))
	tel.mustValue(t, "dsync.lock.acquisitions", 0, ordersName, out("error"))
	tel.mustValue(t, "dsync.lock.wait.duration", 5, ordersName)
	tel.mustValue(t, "dsync.lock.waiters", 0, ordersName)
	tel.mustValue(t, "dsync.lock.hold.duration", 2, ordersName, dsyncotel.KeyEnd.String("released"))
	tel.mustValue(t, "dsync.lock.losses", 0)
	tel.mustValue(t, "dsync.lock.renewal.failures", 0)
	assert.Greater(t, tel.histMin(t, "dsync.lock.hold.duration", dsyncotel.KeyEnd.String("released")), float64(0), "hold duration min")
	assert.Greater(t, tel.histMin(t, "dsync.lock.wait.duration", out("cancelled")), float64(0), "cancelled wait duration")
}

// TestObserverLost checks that a lost hold ends its span with an error and
// counts as a loss.
func TestObserverLost(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	c := client(t, s, newPrefix(), tel.observer())
	ctx, job := tel.tp.Tracer("test").Start(context.Background(), "job")
	m := c.NewMutex("short", dsync.WithLeaseTime(50*time.Millisecond))
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a 50ms lease was not lost")
	}
	require.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost, "cause")
	// The hooks run after the lock contexts are cancelled.
	waitFor(t, 5*time.Second, "the loss to be recorded", func() bool {
		v, _ := tel.value(t, "dsync.lock.losses")
		return v == 1
	})
	job.End()
	holds := tel.spansUnder(job.SpanContext(), "dsync.mutex.hold")
	require.Len(t, holds, 1, "hold spans")
	assert.True(t, hasEvent(holds[0], "dsync.lock.lost"), "lost hold span: events %v", holds[0].Events())
	assert.Equal(t, codes.Error, holds[0].Status().Code, "lost hold span: status %v", holds[0].Status())
	tel.mustValue(t, "dsync.lock.losses", 1, dsyncotel.KeyKind.String("mutex"))
	tel.mustValue(t, "dsync.lock.hold.duration", 1, dsyncotel.KeyEnd.String("lost"))
	// The default records no lock names.
	for _, sp := range tel.spans.Ended() {
		_, ok := attrOf(sp, dsyncotel.KeyName)
		assert.False(t, ok, "span %s records the lock name by default", sp.Name())
	}
	v, _ := tel.value(t, "dsync.lock.losses", dsyncotel.KeyName.String("short"))
	assert.Equal(t, float64(0), v, "metrics record the lock name by default")
}

// A hold found lost before its acquisition was reported (dsync tracks a
// hold, and its renewal may find it gone, before AcquireDone runs): its
// hold span, started by AcquireDone, ends at once as lost, and no span is
// left open. Before, Lost found no span, AcquireDone then started one that
// nothing ended.
func TestObserverLostBeforeAcquireDone(t *testing.T) {
	tel := newTelemetry(t)
	o := tel.observer()
	l := dsync.Lock{Kind: dsync.KindMutex, Name: "early"}
	ctx := o.AcquireStart(context.Background(), dsync.AcquireStart{Lock: l})
	o.Lost(dsync.Lost{Lock: l, Hold: 7, Cause: fmt.Errorf("gone: %w", dsync.ErrLockLost)})
	o.AcquireDone(ctx, dsync.AcquireDone{Lock: l, Acquired: true, Hold: 7, Token: 3, Owner: "a/1"})
	var hold sdktrace.ReadOnlySpan
	for _, sp := range tel.spans.Ended() {
		if sp.Name() == "dsync.mutex.hold" {
			hold = sp
		}
	}
	require.NotNil(t, hold, "the hold span did not end: spans ended %d, started %d", len(tel.spans.Ended()), len(tel.spans.Started()))
	assert.True(t, hasEvent(hold, "dsync.lock.lost"), "hold span: events %v", hold.Events())
	assert.Equal(t, codes.Error, hold.Status().Code, "hold span: status %v", hold.Status())
	assert.Contains(t, hold.Status().Description, "gone")
	assert.Len(t, tel.spans.Started(), len(tel.spans.Ended()), "spans started and not ended")
	// Its release, should one come, ends nothing more.
	o.Released(ctx, dsync.Released{Lock: l, Hold: 7, Complete: true})
	assert.Len(t, tel.spans.Started(), len(tel.spans.Ended()))
}

// TestObserverRenewFailed stalls Redis so that a renewal round fails, and
// checks the counter and the event on the hold span.
func TestObserverRenewFailed(t *testing.T) {
	s := redistest.Start(t) // a server of its own: it gets stopped
	tel := newTelemetry(t)
	// The round must fail well before the hold's lease clock ends it as
	// lost, so that the event lands on the open span. Left to its own
	// timeout (lease/2 after a round starts, every lease/3) it fails at 5/6
	// of the lease at the latest, too close to the end on a loaded machine;
	// rueidis' ConnWriteTimeout fails it within ~0.3s of the stall instead.
	rc := s.Client(t, func(o *rueidis.ClientOption) { o.ConnWriteTimeout = 300 * time.Millisecond })
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(newPrefix()), dsync.WithObserver(tel.observer()), dsync.WithLease(4*time.Second))
	require.NoError(t, err)
	defer c.Close()
	ctx, job := tel.tp.Tracer("test").Start(context.Background(), "job")
	m := c.NewMutex("renewed")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Signal(syscall.SIGSTOP))
	cont := func() { _ = s.Signal(syscall.SIGCONT) }
	defer cont()
	waitFor(t, 8*time.Second, "a failed renewal round", func() bool {
		v, _ := tel.value(t, "dsync.lock.renewal.failures")
		return v >= 1
	})
	cont()
	// Held or lost by now, either way the hold span must end and carry the event.
	if err := m.UnlockContext(context.WithoutCancel(lctx)); !errors.Is(err, dsync.ErrNotHeld) {
		require.NoError(t, err)
	}
	job.End()
	holds := tel.spansUnder(job.SpanContext(), "dsync.mutex.hold")
	require.Len(t, holds, 1, "hold spans")
	assert.True(t, hasEvent(holds[0], "dsync.lock.renew_failed"), "hold span events = %v, want dsync.lock.renew_failed", holds[0].Events())
}

// TestObserverAttributeFilter checks that a filter removes attributes from
// spans and metrics alike.
func TestObserverAttributeFilter(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	keepNames := func(kv attribute.KeyValue) bool {
		return kv.Key != dsyncotel.KeyName || kv.Value.AsString() == "public"
	}
	c := client(t, s, newPrefix(), tel.observer(dsyncotel.WithLockNames(true), dsyncotel.WithAttributeFilter(keepNames)))
	ctx := context.Background()
	for _, name := range []string{"public", "user-4711"} {
		m := c.NewMutex(name)
		lctx, ok, err := m.TryLockContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, m.UnlockContext(lctx))
	}
	names := map[string]int{}
	for _, sp := range tel.spans.Ended() {
		if v, ok := attrOf(sp, dsyncotel.KeyName); ok {
			names[v.AsString()]++
		}
	}
	assert.Equal(t, 2, names["public"], "names on spans = %v, want public on its acquire and hold spans only", names)
	assert.Equal(t, 0, names["user-4711"], "names on spans = %v, want public on its acquire and hold spans only", names)
	tel.mustValue(t, "dsync.lock.acquisitions", 1, dsyncotel.KeyName.String("public"))
	tel.mustValue(t, "dsync.lock.acquisitions", 0, dsyncotel.KeyName.String("user-4711"))
	tel.mustValue(t, "dsync.lock.acquisitions", 2, dsyncotel.KeyKind.String("mutex"))
}

// The duration histograms have explicit boundaries suited to lock waits
// (sub-millisecond to a minute), not the SDK's defaults (whose first finite
// bucket ends at 5 s), and a failed acquisition carries error.type.
func TestObserverHistogramBucketsAndErrorType(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	prefix := newPrefix()
	c1 := client(t, s, prefix, tel.observer())
	c2 := client(t, s, prefix, tel.observer())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c1.NewMutex("h").LockContext(ctx)
	require.NoError(t, err)
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	_, err = c2.NewMutex("h").LockContext(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the wait")
	require.NoError(t, c1.NewMutex("h").UnlockContext(l))
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(ctx, &rm))
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				seen[m.Name] = true
				assert.True(t, slices.Equal(dp.Bounds, dsyncotel.DurationBuckets), "%s bounds %v, want %v", m.Name, dp.Bounds, dsyncotel.DurationBuckets)
				if m.Name != "dsync.lock.wait.duration" {
					continue
				}
				out, _ := dp.Attributes.Value(dsyncotel.KeyOutcome)
				et, hasType := dp.Attributes.Value(dsyncotel.KeyErrorType)
				switch out.AsString() {
				case dsyncotel.OutcomeCancelled:
					assert.Equal(t, "context.DeadlineExceeded", et.AsString(), "cancelled wait has error.type")
					t.Logf("wait histogram, cancelled: count %d, bucket counts %v", dp.Count, dp.BucketCounts)
				case dsyncotel.OutcomeAcquired:
					assert.False(t, hasType, "an acquisition has error.type %q", et.AsString())
					t.Logf("wait histogram, acquired: count %d, bucket counts %v", dp.Count, dp.BucketCounts)
				}
			}
		}
	}
	for _, name := range []string{"dsync.lock.wait.duration", "dsync.lock.hold.duration"} {
		assert.True(t, seen[name], "no data points for %s", name)
	}
}

// The acquire span and the hold span (where blocked-by links land) name
// the owner, "<client name>/<random>", so a trace shows which Client
// waited or holds.
func TestObserverOwnerAttribute(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	c := client(t, s, newPrefix(), tel.observer(), dsync.WithClientName("billing-7"))
	l, err := c.NewMutex("o").LockContext(context.Background())
	require.NoError(t, err)
	owner, _ := dsync.OwnerOf(l)
	require.NoError(t, c.NewMutex("o").UnlockContext(l))
	for _, name := range []string{"dsync.mutex.acquire", "dsync.mutex.hold"} {
		found := false
		for _, sp := range tel.spans.Ended() {
			if sp.Name() != name {
				continue
			}
			for _, kv := range sp.Attributes() {
				if kv.Key == dsyncotel.KeyOwner && kv.Value.AsString() == owner && strings.HasPrefix(owner, "billing-7/") {
					found = true
				}
			}
		}
		require.True(t, found, "no %s span with %s = %s", name, dsyncotel.KeyOwner, owner)
	}
}

// Every attribute key the observer records (the Key constants, and any
// key written out in observer.go) is listed in doc.go's Attributes table.
func TestDocListsEveryAttribute(t *testing.T) {
	src, err := os.ReadFile("observer.go")
	require.NoError(t, err)
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "// # Attributes")
	require.True(t, ok, "doc.go has no Attributes section")
	table, _, _ = strings.Cut(table, "// # ")
	keys := regexp.MustCompile(`attribute\.(?:Key|String|Int|Int64|Bool|Float64)\("([^"]+)"`).FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.Regexp(t, `(?m)^//\t`+regexp.QuoteMeta(k[1])+` `, table, "doc.go's Attributes table does not list %s", k[1])
	}
}
