package dsyncotel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys recorded on spans and metrics.
const (
	KeyKind         = attribute.Key("dsync.lock.kind")
	KeyMode         = attribute.Key("dsync.lock.mode")
	KeyPermits      = attribute.Key("dsync.lock.permits")
	KeyName         = attribute.Key("dsync.lock.name") // only with WithLockNames
	KeyTry          = attribute.Key("dsync.lock.try")
	KeyOutcome      = attribute.Key("dsync.lock.outcome")
	KeyAttempts     = attribute.Key("dsync.lock.attempts")
	KeyQueued       = attribute.Key("dsync.lock.queued")  // true when the acquisition waited in its Client's queue (AcquireDone.Queued); absent otherwise
	KeyGranted      = attribute.Key("dsync.lock.granted") // true when a release of another Client granted a Mutex in Redis (AcquireDone.Granted); absent otherwise
	KeyReentered    = attribute.Key("dsync.lock.reentered")
	KeyFencingToken = attribute.Key("dsync.lock.fencing_token")
	KeyOwner        = attribute.Key("dsync.lock.owner") // "<client name>/<random>", on acquire and hold spans
	KeyEnd          = attribute.Key("dsync.lock.end")   // released or lost, on hold durations
	KeyCause        = attribute.Key("dsync.lock.cause") // why a hold was lost, on the dsync.lock.lost event
	// KeyLinkBlockedBy marks a link from an acquire span to the hold span
	// of a holder it waited for; KeyBlockedFor, on the same link, is how
	// much of the wait that holder held the lock, in seconds (the overlap
	// of the hold with the wait), so that a report can sum the wait each
	// holder caused.
	KeyLinkBlockedBy = attribute.Key("dsync.lock.blocked_by")
	KeyBlockedFor    = attribute.Key("dsync.lock.blocked_for")
	// KeyBlockersDropped, on an acquire span, counts the holders it waited
	// for beyond dsync.MaxBlockers, left without a link (those that held
	// the lock for the least of the wait).
	KeyBlockersDropped = attribute.Key("dsync.lock.blockers_dropped")

	// Semantic-convention attributes: error.type on failed acquisitions
	// (spans and metrics) and renewal failures, with exception.message on
	// the renewal-failure span event.
	KeyErrorType        = attribute.Key("error.type")
	KeyExceptionMessage = attribute.Key("exception.message")
)

// DurationBuckets are the bucket boundaries, in seconds, of the wait and
// hold duration histograms: 100 µs to 60 s, roughly 1-2.5-5 per decade, so
// that an uncontended acquisition (well under a millisecond), a contended
// one (milliseconds) and a long hold (seconds) each land in buckets of
// their own. The SDK's default boundaries start at 5 and would put every
// wait under 5 s in one bucket.
var DurationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Values of KeyOutcome.
const (
	OutcomeAcquired    = "acquired"
	OutcomeNotAcquired = "not_acquired" // a Try found the lock held
	OutcomeCancelled   = "cancelled"    // the caller's context ended the wait
	OutcomeError       = "error"
)

// NewObserver returns hooks that record spans and metrics for the Client
// they are installed in with dsync.WithObserver. Instruments are created
// once, here.
//
// Give each Client the result of its own NewObserver call: hold spans are
// matched to their release by the Client's hold identifiers, which are
// unique only within one Client. The hooks are safe for concurrent use and
// never block on I/O; the exporter behind the providers does that.
func NewObserver(opts ...Option) dsync.Observer {
	o := newObserver(newConfig(opts))
	return dsync.Observer{
		AcquireStart: o.acquireStart,
		AcquireDone:  o.acquireDone,
		Released:     o.released,
		RenewFailed:  o.renewFailed,
		Lost:         o.lost,
		HoldTag:      o.holdTag,
	}
}

type observer struct {
	cfg    config
	tracer trace.Tracer

	waitDur   metric.Float64Histogram
	holdDur   metric.Float64Histogram
	acquired  metric.Int64Counter
	losses    metric.Int64Counter
	waiters   metric.Int64UpDownCounter
	renewFail metric.Int64Counter

	mu    sync.Mutex
	holds map[holdKey]trace.Span // hold spans not yet ended
	// lostEarly: holds whose Lost came before their AcquireDone started
	// the hold span (dsync tracks a hold, and may find it lost, before it
	// reports the acquisition): startHold ends such a span at once. Each
	// entry is taken by its AcquireDone; those older than lostEarlyLife
	// are dropped as entries are added.
	lostEarly map[holdKey]lostNote

	// sets caches, per lock (kind, mode and, with WithLockNames, name),
	// the metric attribute sets the hooks record with (see metricSets), so
	// that an acquisition does not build them (an attribute.Set each:
	// allocated and sorted); at most maxSets locks, beyond which they are
	// built per call.
	sets  sync.Map // lockSetKey -> *lockSets
	nsets atomic.Int64

	bg *background // WithBackgroundSpans; nil: all in the hooks
}

// holdKey names a hold. The lock is part of it so that, should one observer
// be shared by Clients after all, a release cannot end another lock's span.
type holdKey struct {
	lock dsync.Lock
	id   uint64
}

// acquireKey is the context key under which acquireStart passes the caller's
// context on to acquireDone, where the hold span is started beside the
// acquire span rather than under it.
type acquireKey struct{}

func newObserver(cfg config) *observer {
	o := &observer{
		cfg:    cfg,
		tracer: cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		holds:  make(map[holdKey]trace.Span),

		lostEarly: make(map[holdKey]lostNote),
	}
	if cfg.background > 0 {
		o.bg = &background{max: cfg.background}
	}
	m := cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	// Instrument errors are reported to the global handler and yield a
	// working no-op instrument, so telemetry never breaks locking.
	var err error
	var errs []error
	o.waitDur, err = m.Float64Histogram("dsync.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition until the lock was held or the wait ended."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	errs = append(errs, err)
	o.holdDur, err = m.Float64Histogram("dsync.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a hold lasted, from its acquisition until its release or loss."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	errs = append(errs, err)
	o.acquired, err = m.Int64Counter("dsync.lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions that ended, by outcome."))
	errs = append(errs, err)
	o.losses, err = m.Int64Counter("dsync.lock.losses", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds lost: their lease ran out unrenewed or their key was gone."))
	errs = append(errs, err)
	o.waiters, err = m.Int64UpDownCounter("dsync.lock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquisitions waiting for a lock now."))
	errs = append(errs, err)
	o.renewFail, err = m.Int64Counter("dsync.lock.renewal.failures", metric.WithUnit("{round}"),
		metric.WithDescription("Renewal rounds that could not reach Redis; the holds are retried."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return o
}

// lockAttrs are the attributes that identify a lock, for spans and metrics.
func (o *observer) lockAttrs(l dsync.Lock, extra ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 4+len(extra))
	kv = append(kv, KeyKind.String(string(l.Kind)))
	if l.Mode != "" {
		kv = append(kv, KeyMode.String(l.Mode))
	}
	if o.cfg.lockNames {
		kv = append(kv, KeyName.String(l.Name))
	}
	kv = append(kv, extra...)
	return o.filter(kv)
}

// lockSetKey names the locks that share their metric attributes.
type lockSetKey struct{ kind, mode, name string }

// lockSets are the metric attribute sets of one lock's hooks, made once.
type lockSets struct {
	lock     metric.MeasurementOption // lockAttrs alone: waiters, losses
	acquired metric.MeasurementOption // outcome acquired
	notAcq   metric.MeasurementOption // outcome not_acquired
	released metric.MeasurementOption // hold end released

	// For spans: their names, and lockAttrs alone (filtered), which
	// spanAttrs extends per call.
	acquireName, holdName string
	span                  []attribute.KeyValue
}

// maxSets bounds the locks whose sets observer.sets keeps.
const maxSets = 1024

// metricSets returns the sets of lock l, made now if need be; nil past
// maxSets locks (the caller builds them).
func (o *observer) metricSets(l dsync.Lock) *lockSets {
	k := lockSetKey{kind: string(l.Kind), mode: l.Mode}
	if o.cfg.lockNames {
		k.name = l.Name
	}
	if v, ok := o.sets.Load(k); ok {
		return v.(*lockSets)
	}
	if o.nsets.Load() >= maxSets {
		return nil
	}
	ls := &lockSets{
		lock:     metric.WithAttributes(o.lockAttrs(l)...),
		acquired: metric.WithAttributes(o.lockAttrs(l, KeyOutcome.String(OutcomeAcquired))...),
		notAcq:   metric.WithAttributes(o.lockAttrs(l, KeyOutcome.String(OutcomeNotAcquired))...),
		released: metric.WithAttributes(o.lockAttrs(l, KeyEnd.String("released"))...),

		acquireName: "dsync." + string(l.Kind) + ".acquire",
		holdName:    "dsync." + string(l.Kind) + ".hold",
		span:        o.lockAttrs(l),
	}
	if v, loaded := o.sets.LoadOrStore(k, ls); loaded {
		return v.(*lockSets)
	}
	o.nsets.Add(1)
	return ls
}

// lockSet is the metric attribute set of l alone.
func (o *observer) lockSet(l dsync.Lock) metric.MeasurementOption {
	if ls := o.metricSets(l); ls != nil {
		return ls.lock
	}
	return metric.WithAttributes(o.lockAttrs(l)...)
}

// spanAttrs are the attributes of a span of lock l: lockAttrs(l, extra...),
// from ls when there is one.
func (o *observer) spanAttrs(ls *lockSets, l dsync.Lock, extra ...attribute.KeyValue) []attribute.KeyValue {
	if ls == nil {
		return o.lockAttrs(l, extra...)
	}
	kv := make([]attribute.KeyValue, 0, len(ls.span)+len(extra))
	kv = append(kv, ls.span...)
	if o.cfg.filter == nil {
		return append(kv, extra...)
	}
	for _, a := range extra {
		if o.cfg.filter(a) {
			kv = append(kv, a)
		}
	}
	return kv
}

// spanName is the name of lock l's acquire span (or hold span, with hold).
func spanName(ls *lockSets, l dsync.Lock, hold bool) string {
	switch {
	case ls != nil && hold:
		return ls.holdName
	case ls != nil:
		return ls.acquireName
	case hold:
		return "dsync." + string(l.Kind) + ".hold"
	}
	return "dsync." + string(l.Kind) + ".acquire"
}

func (o *observer) filter(kv []attribute.KeyValue) []attribute.KeyValue {
	if o.cfg.filter == nil {
		return kv
	}
	out := kv[:0]
	for _, a := range kv {
		if o.cfg.filter(a) {
			out = append(out, a)
		}
	}
	return out
}

func (o *observer) acquireStart(ctx context.Context, e dsync.AcquireStart) context.Context {
	ls := o.metricSets(e.Lock)
	if !e.Try {
		if ls != nil {
			o.waiters.Add(ctx, 1, ls.lock)
		} else {
			o.waiters.Add(ctx, 1, o.lockSet(e.Lock))
		}
	}
	sctx, _ := o.tracer.Start(ctx, spanName(ls, e.Lock, false),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.spanAttrs(ls, e.Lock, KeyPermits.Int64(e.N), KeyTry.Bool(e.Try))...))
	return context.WithValue(sctx, acquireKey{}, ctx)
}

func outcome(e dsync.AcquireDone) string {
	switch {
	case e.Acquired:
		return OutcomeAcquired
	case e.Err == nil:
		return OutcomeNotAcquired
	case errors.Is(e.Err, context.Canceled), errors.Is(e.Err, context.DeadlineExceeded):
		return OutcomeCancelled
	default:
		return OutcomeError
	}
}

// errorType is the semconv error.type of err: the dsync or context
// sentinel it matches, or "_OTHER" (the attribute must stay low in
// cardinality, so messages and wrapped Redis errors are not used).
func errorType(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{context.DeadlineExceeded, "context.DeadlineExceeded"},
		{context.Canceled, "context.Canceled"},
		{dsync.ErrClosed, "dsync.ErrClosed"},
		{dsync.ErrInvalidArgument, "dsync.ErrInvalidArgument"},
		{dsync.ErrNotReplicated, "dsync.ErrNotReplicated"},
		{dsync.ErrLockLost, "dsync.ErrLockLost"},
		{dsync.ErrWrongContext, "dsync.ErrWrongContext"},
		{dsync.ErrNotHeld, "dsync.ErrNotHeld"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "_OTHER"
}

func (o *observer) acquireDone(ctx context.Context, e dsync.AcquireDone) {
	if o.bg == nil {
		o.finishAcquire(ctx, e, time.Time{})
		o.startHold(ctx, e)
		return
	}
	// The hold span now (its context is the hold's tag, which HoldTag
	// returns next), the rest in the background.
	end := time.Now()
	o.startHold(ctx, e)
	o.bg.do(func() { o.finishAcquire(ctx, e, end) })
}

// finishAcquire records the end of an acquisition: its metrics, and its
// span's links and attributes; it ends the span at end (zero: now).
func (o *observer) finishAcquire(ctx context.Context, e dsync.AcquireDone, end time.Time) {
	out := outcome(e)
	// The span's attributes, in one array: the outcome (also the metrics'),
	// error.type, then the rest.
	kv := make([]attribute.KeyValue, 1, 7)
	kv[0] = KeyOutcome.String(out)
	if e.Err != nil {
		kv = append(kv, KeyErrorType.String(errorType(e.Err)))
	}
	var mattrs metric.MeasurementOption
	ls := o.metricSets(e.Lock)
	switch {
	case ls != nil && out == OutcomeAcquired && e.Err == nil:
		mattrs = ls.acquired
	case ls != nil && out == OutcomeNotAcquired:
		mattrs = ls.notAcq
	default:
		mattrs = metric.WithAttributes(o.lockAttrs(e.Lock, kv...)...)
	}
	o.acquired.Add(ctx, 1, mattrs)
	o.waitDur.Record(ctx, e.Wait.Seconds(), mattrs)
	if !e.Try {
		if ls != nil {
			o.waiters.Add(ctx, -1, ls.lock)
		} else {
			o.waiters.Add(ctx, -1, o.lockSet(e.Lock))
		}
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		// Not sampled: links and attributes would be dropped; the span
		// ends all the same (a no-op, or a non-recording span's end).
		span.End()
		return
	}
	// Who blocked whom: a link to the hold span of each holder that held
	// the lock while the acquisition waited, in this process or another,
	// in the order the holds began, with the time it held it during the
	// wait (see holdTag).
	if len(e.Blockers) > 0 {
		// One array for every link's two attributes.
		la := make([]attribute.KeyValue, 0, 2*len(e.Blockers))
		for _, b := range e.Blockers {
			if sc, ok := parseTraceparent(b.Tag); ok {
				la = append(la, blockedByTrue, KeyBlockedFor.Float64(b.Overlap.Seconds()))
				span.AddLink(trace.Link{SpanContext: sc, Attributes: la[len(la)-2 : len(la) : len(la)]})
			}
		}
	}
	attrs := append(kv, KeyAttempts.Int(e.Attempts), KeyReentered.Bool(e.Reentered))
	if e.Granted {
		attrs = append(attrs, KeyGranted.Bool(true))
	}
	if e.Queued {
		attrs = append(attrs, KeyQueued.Bool(true))
	}
	if e.BlockersDropped > 0 {
		attrs = append(attrs, KeyBlockersDropped.Int(e.BlockersDropped))
	}
	if e.Owner != "" {
		// On spans only: owners are unbounded, metrics must not carry them.
		attrs = append(attrs, KeyOwner.String(e.Owner))
	}
	if e.Acquired {
		attrs = append(attrs, KeyFencingToken.Int64(int64(e.Token)))
	}
	span.SetAttributes(o.filter(attrs)...)
	if out == OutcomeError {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	if end.IsZero() {
		span.End()
	} else {
		span.End(trace.WithTimestamp(end))
	}
}

// startHold starts the span of the hold an acquisition made, when the
// hold began; for a re-entry, it notes it on the hold's span.
func (o *observer) startHold(ctx context.Context, e dsync.AcquireDone) {
	if !e.Acquired {
		return
	}
	span := trace.SpanFromContext(ctx)
	k := holdKey{lock: e.Lock, id: e.Hold}
	o.mu.Lock()
	if hs, ok := o.holds[k]; ok {
		hs.AddEvent("dsync.lock.reentered")
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	// A new hold: no other hook can see it before this one returns (a
	// re-entry needs the context LockContext returns after it), so the
	// span is started outside o.mu, which the other holds' hooks take.
	parent, _ := ctx.Value(acquireKey{}).(context.Context)
	if parent == nil {
		parent = ctx
	}
	ls := o.metricSets(e.Lock)
	var hattrs []attribute.KeyValue
	if e.Owner != "" {
		// The holder, on the span the waiters' blocked-by links reach.
		hattrs = o.spanAttrs(ls, e.Lock, KeyPermits.Int64(e.N), KeyFencingToken.Int64(int64(e.Token)), KeyOwner.String(e.Owner))
	} else {
		hattrs = o.spanAttrs(ls, e.Lock, KeyPermits.Int64(e.N), KeyFencingToken.Int64(int64(e.Token)))
	}
	// The hold span begins when the hold did: for a Mutex handed on inside
	// its Client, at the handoff, before the acquire span ends (the waiter's
	// goroutine runs some time after).
	start := e.HeldSince
	if start.IsZero() {
		start = time.Now()
	}
	_, hs := o.tracer.Start(parent, spanName(ls, e.Lock, true),
		trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(hattrs...),
		trace.WithLinks(trace.Link{SpanContext: span.SpanContext()}))
	o.mu.Lock()
	ln, lost := o.lostEarly[k]
	if lost {
		delete(o.lostEarly, k)
	} else {
		o.holds[k] = hs
	}
	o.mu.Unlock()
	if lost {
		endLost(hs, ln.cause)
	}
}

// lostNote is a loss reported before its hold span started.
type lostNote struct {
	cause error
	at    time.Time
}

// lostEarlyLife is how long a loss waits for its hold's AcquireDone.
const lostEarlyLife = time.Minute

// endLost ends the hold span hs of a hold lost for cause.
func endLost(hs trace.Span, cause error) {
	msg := "lock lost"
	if cause != nil {
		msg = cause.Error()
	}
	hs.AddEvent("dsync.lock.lost", trace.WithAttributes(KeyCause.String(msg)))
	hs.SetStatus(codes.Error, msg)
	hs.End()
}

// holdTag returns the hold span's context as a W3C traceparent
// ("00-<trace id>-<span id>-<flags>"), which dsync keeps with the lock in
// Redis while the hold lasts and hands to the waiters it blocks, in every
// process, as AcquireDone.BlockedBy. "" (nothing stored) when the hold
// span is not sampled.
func (o *observer) holdTag(_ context.Context, e dsync.AcquireDone) string {
	o.mu.Lock()
	hs, ok := o.holds[holdKey{lock: e.Lock, id: e.Hold}]
	o.mu.Unlock()
	if !ok {
		return ""
	}
	sc := hs.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		return "" // a link to a span nobody records is no use
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

var blockedByTrue = KeyLinkBlockedBy.Bool(true)

// parseTraceparent reads what holdTag wrote, as a remote span context.
func parseTraceparent(s string) (trace.SpanContext, bool) {
	// 00-<32 hex>-<16 hex>-<2 hex>
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(s[3:35])
	sid, err2 := trace.SpanIDFromHex(s[36:52])
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if s[53:55] == "01" {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	return sc, sc.IsValid()
}

// take removes and returns the span of hold k, if it is open.
func (o *observer) take(k holdKey) trace.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	hs := o.holds[k]
	delete(o.holds, k)
	return hs
}

func (o *observer) released(ctx context.Context, e dsync.Released) {
	k := holdKey{lock: e.Lock, id: e.Hold}
	if !e.Complete {
		o.mu.Lock()
		if hs, ok := o.holds[k]; ok {
			hs.AddEvent("dsync.lock.released", trace.WithAttributes(KeyReentered.Bool(true)))
		}
		o.mu.Unlock()
		return
	}
	hs := o.take(k)
	if o.bg == nil {
		o.finishRelease(ctx, e, hs, time.Time{})
		return
	}
	end := time.Now()
	o.bg.do(func() { o.finishRelease(ctx, e, hs, end) })
}

// finishRelease ends the span hs (if any) of a hold released, at end
// (zero: now), and records how long it was held.
func (o *observer) finishRelease(ctx context.Context, e dsync.Released, hs trace.Span, end time.Time) {
	if hs != nil {
		if e.Err != nil {
			hs.RecordError(e.Err)
			hs.SetStatus(codes.Error, e.Err.Error())
		}
		if end.IsZero() {
			hs.End()
		} else {
			hs.End(trace.WithTimestamp(end))
		}
	}
	var opt metric.MeasurementOption
	if ls := o.metricSets(e.Lock); ls != nil {
		opt = ls.released
	} else {
		opt = metric.WithAttributes(o.lockAttrs(e.Lock, KeyEnd.String("released"))...)
	}
	o.holdDur.Record(ctx, e.Held.Seconds(), opt)
}

// background runs the work the hooks queue (WithBackgroundSpans), in
// order, on one goroutine, started when work is queued and gone once
// there is none left; beyond max queued, the hook does its work itself.
type background struct {
	mu      sync.Mutex
	q       []func()
	spare   []func()
	running bool
	max     int
}

func (b *background) do(f func()) {
	b.mu.Lock()
	if len(b.q) >= b.max {
		b.mu.Unlock()
		f()
		return
	}
	b.q = append(b.q, f)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.run()
	}
}

func (b *background) run() {
	for {
		b.mu.Lock()
		q := b.q
		if len(q) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.q, b.spare = b.spare[:0], nil
		b.mu.Unlock()
		for i, f := range q {
			f()
			q[i] = nil
		}
		b.mu.Lock()
		b.spare = q[:0]
		b.mu.Unlock()
	}
}

func (o *observer) lost(e dsync.Lost) {
	// The span ends before the metrics move, so that whoever sees the loss
	// counted also finds the span ended.
	defer func() {
		ctx := context.Background() // the event has none: it comes from a timer or the renewal loop
		o.losses.Add(ctx, 1, o.lockSet(e.Lock))
		o.holdDur.Record(ctx, e.Held.Seconds(), metric.WithAttributes(o.lockAttrs(e.Lock, KeyEnd.String("lost"))...))
	}()
	k := holdKey{lock: e.Lock, id: e.Hold}
	o.mu.Lock()
	hs, ok := o.holds[k]
	delete(o.holds, k)
	if !ok {
		// Its AcquireDone has not started the span yet: it ends it.
		now := time.Now()
		for ek, n := range o.lostEarly {
			if now.Sub(n.at) > lostEarlyLife {
				delete(o.lostEarly, ek)
			}
		}
		o.lostEarly[k] = lostNote{cause: e.Cause, at: now}
	}
	o.mu.Unlock()
	if ok {
		endLost(hs, e.Cause)
	}
}

func (o *observer) renewFailed(e dsync.RenewFailed) {
	o.renewFail.Add(context.Background(), 1)
	if len(e.HoldIDs) == 0 {
		return
	}
	ids := make(map[uint64]bool, len(e.HoldIDs))
	for _, id := range e.HoldIDs {
		ids[id] = true
	}
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, hs := range o.holds {
		if ids[k.id] {
			hs.AddEvent("dsync.lock.renew_failed", trace.WithAttributes(KeyErrorType.String(errorType(e.Err)), KeyExceptionMessage.String(msg)))
		}
	}
}
