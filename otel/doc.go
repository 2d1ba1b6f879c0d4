// Package dsyncotel records dsync lock activity as OpenTelemetry spans and
// metrics. It lives in the folder otel/ but is named dsyncotel, so that it
// does not shadow go.opentelemetry.io/otel where a program imports both.
//
// The dsync core does not import OpenTelemetry: it calls the hooks of a
// dsync.Observer, and NewObserver returns one that turns those calls into
// telemetry:
//
//	c, err := dsync.NewClient(rc, dsync.WithObserver(dsyncotel.NewObserver()))
//
// # Spans
//
// Every acquisition (Lock, TryLock, Acquire, ...) gets a span named
// "dsync.<kind>.acquire", e.g. "dsync.mutex.acquire", a child of the span in
// the caller's context. It runs from the call until the lock is held or the
// wait ends, and carries the attributes dsync.lock.kind, dsync.lock.mode
// (when the primitive has modes), dsync.lock.permits, dsync.lock.try,
// dsync.lock.outcome (acquired, not_acquired, cancelled or error),
// dsync.lock.attempts (acquire scripts sent to Redis), dsync.lock.reentered,
// dsync.lock.owner (the owner, "<client name>/<random>": the name tells
// which process or Client waited or holds; see dsync.WithClientName) and,
// when acquired, dsync.lock.fencing_token. A failed outcome (cancelled
// or error) also carries the semantic-convention attribute error.type (the
// dsync or context sentinel the error matches, e.g.
// context.DeadlineExceeded or dsync.ErrClosed, else _OTHER), on the span
// and on the wait and acquisition metrics; an outcome of error also sets
// the span status.
//
// A new hold (not a re-entry) gets a second span, "dsync.<kind>.hold", a
// sibling of the acquire span under the caller's span, that ends when the
// hold is released or lost. It receives events for re-entries and partial
// releases ("dsync.lock.reentered", "dsync.lock.released"), for renewal
// rounds that failed while it was held ("dsync.lock.renew_failed", with
// error.type and exception.message) and for
// its loss ("dsync.lock.lost", which also sets an error status).
//
// An Election's campaign is an acquisition and its term a hold of kind
// "election": "dsync.election.acquire" runs while the candidate waits in
// line, and "dsync.election.hold" from the start of the term until it is
// resigned or lost (with dsync.lock.fencing_token, the term).
//
// # Who blocked whom
//
// An acquisition that had to wait links its acquire span to the hold span
// of each holder it found holding the lock, whether that holder runs in
// the same process or in another one. The link carries the attribute
// dsync.lock.blocked_by=true. It works through the dsync.Observer hook
// HoldTag: when a hold starts, the observer returns its hold span's
// context as a W3C traceparent, which dsync keeps with the lock in Redis
// (a hash "<lock key>:tags", one field per holder, removed at release and
// at Client.Close, and gone within one lease of the hold's end if its
// holder died) while the hold lasts; a waiter reads it once, just after
// its first attempt fails, and the observer turns it into the link. Only
// sampled hold spans are stored. The price, with the observer installed:
// one Redis command per hold and one per release, one per tagged hold per
// renewal round (in the round's pipeline), and two per acquisition that
// waits (none for one that does not).
//
// A walkthrough, with two services A and B and the lock "orders":
//
//  1. A's request handler (span "POST /orders", trace 4bf9…) calls
//     m.LockContext(ctx). Its span "dsync.mutex.acquire" ends at once with
//     outcome acquired; the span "dsync.mutex.hold" starts beside it, and
//     its context, 00-4bf9…-00f0…-01, is stored with the lock.
//  2. B's handler (span "GET /orders/7", trace 7c21…, in another process)
//     calls m.LockContext(ctx) and finds the lock held. Its
//     "dsync.mutex.acquire" span waits.
//  3. A releases: its hold span ends (its duration is how long B's wait
//     was caused by A, from the moment B arrived). B acquires; its acquire
//     span ends with dsync.lock.attempts=2 and a link to the span 00f0…
//     of trace 4bf9….
//
// In a trace viewer, B's slow request shows the acquire span as the long
// child, and following its link opens A's trace at the hold span: the
// request that held "orders", with its own children showing what it did
// while holding. The attribute dsync.lock.owner names the Client on both
// sides (see dsync.WithClientName), which is enough when tracing is off;
// `dsync inspect` and `dsync top` show the same owners, and for a Mutex
// the Clients waiting for it.
//
// # Metrics
//
// Instruments follow the OpenTelemetry naming conventions; durations are in
// seconds, in explicit buckets from 100 µs to 60 s (DurationBuckets), so
// sub-millisecond, contended and long waits fall in buckets of their own.
//
//	dsync.lock.wait.duration      histogram, s   acquisition time, by outcome
//	dsync.lock.hold.duration      histogram, s   time from acquire to release or loss
//	dsync.lock.acquisitions       counter        acquisitions, by outcome
//	dsync.lock.losses             counter        holds lost
//	dsync.lock.waiters            up-down counter acquisitions waiting now
//	dsync.lock.renewal.failures   counter        renewal rounds that failed
//
// # Lock names
//
// Lock names are not recorded by default: they can be unbounded (one lock
// per order, per user) and so would explode the cardinality of every metric,
// and they may be sensitive. WithLockNames(true) adds the attribute
// dsync.lock.name to spans and metrics; WithAttributeFilter decides per
// attribute.
package dsyncotel
