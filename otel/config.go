package dsyncotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures NewObserver.
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	lockNames bool
	filter    func(attribute.KeyValue) bool
	// background: the most span endings queued for the background
	// goroutine (WithBackgroundSpans); 0: none, all in the hooks.
	background int
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	// Defaults are resolved here, once: a nil provider is the global one.
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}

// WithTracerProvider sets the tracer provider; nil, or no option, uses the
// global one (otel.GetTracerProvider) as it is when NewObserver is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the meter provider; nil, or no option, uses the
// global one (otel.GetMeterProvider) as it is when NewObserver is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithLockNames records the lock name as the attribute dsync.lock.name on
// spans and metrics when on is true. It is off by default, because names
// can be unbounded and would make every metric series unbounded too.
func WithLockNames(on bool) Option {
	return func(c *config) { c.lockNames = on }
}

// WithAttributeFilter drops every span and metric attribute for which keep
// returns false. It runs after WithLockNames, so it can, for instance, keep
// the names of a few well-known locks and drop the rest. Nil keeps all.
func WithAttributeFilter(keep func(attribute.KeyValue) bool) Option {
	return func(c *config) { c.filter = keep }
}

// WithBackgroundSpans ends the spans off the lock's critical path: the
// hooks only start the hold span (whose context is the hold's tag, see
// Observer.HoldTag) and take the times; adding the blocked_by links and
// the attributes, ending the acquire and hold spans (at the times the
// hooks took, with trace.WithTimestamp) and recording the metrics run on
// a goroutine of the observer's, started when work is queued and gone
// once the queue is empty. At most queue endings wait (default 4096 for
// queue <= 0); beyond that a hook does its own work, as without the
// option, so nothing is dropped. Spans then reach the span processors a
// little after the hook returned, not before. Under contention the
// holder's goroutine goes on with the lock instead of building the spans
// of the wait that just ended.
func WithBackgroundSpans(queue int) Option {
	if queue <= 0 {
		queue = 4096
	}
	return func(c *config) { c.background = queue }
}
