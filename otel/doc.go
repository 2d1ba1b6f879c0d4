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
// dsync.lock.attempts (acquire scripts sent to Redis), dsync.lock.queued
// (true, only when the acquisition waited in its Client behind another
// goroutine of it: a Mutex's local queue), dsync.lock.granted (true, only
// when a release of another Client granted a Mutex in Redis; a Mutex
// acquisition with one attempt and neither attribute was held up by
// nobody),
// dsync.lock.reentered,
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
// hold is released or lost. It carries dsync.lock.kind, dsync.lock.mode,
// dsync.lock.permits, dsync.lock.fencing_token and dsync.lock.owner (the
// holder: a waiter's blocked-by link lands here, so the span names who
// held the lock). It receives events for re-entries and partial
// releases ("dsync.lock.reentered", "dsync.lock.released"), for renewal
// rounds that failed while it was held ("dsync.lock.renew_failed", with
// error.type and exception.message) and for its loss ("dsync.lock.lost",
// with dsync.lock.cause, which also sets an error status).
//
// An Election's campaign is an acquisition and its term a hold of kind
// "election": "dsync.election.acquire" runs while the candidate waits in
// line, and "dsync.election.hold" from the start of the term until it is
// resigned or lost (with dsync.lock.fencing_token, the term).
//
// # Who blocked whom
//
// An acquisition that waited links its acquire span to the hold span of
// each holder that held the lock at some moment of its wait, in the order
// the holds began: goroutines of its own Client (a Mutex's local queue and
// the handoffs inside the Client included), other Clients of the process,
// other processes. So a wait behind a chain of holders links to every
// holder of the chain. Each link carries dsync.lock.blocked_by=true and
// dsync.lock.blocked_for, the seconds of the wait that holder held the
// lock (its hold's overlap with the wait), so that summing blocked_for per
// hold span (or per dsync.lock.owner) gives the wait each holder caused.
// This holds for every primitive: Mutex (LockContext and Lock), FairMutex,
// RWMutex (readers behind a writer, a writer behind readers), Semaphore
// (the holders whose release let it in and those holding when it queued),
// an Election's campaigns, a Cond's re-acquisition of its Mutex (a Mutex
// acquisition span), a Once or a Group key waiting for a run; for a wait
// that ended with the lock and for one that gave up. Holders that held
// the lock together (readers, a Semaphore's holders) each count for the
// time they held it, so their blocked_for may add up to more than the
// wait. At most dsync.MaxBlockers (128, the SDK's default link limit)
// links per span: beyond it the holders that held the lock for the least
// of the wait are dropped, and the span counts them in
// dsync.lock.blockers_dropped. Only sampled hold spans are linked.
//
// It works through the dsync.Observer hook HoldTag: when a hold starts, the
// observer returns its hold span's context as a W3C traceparent, the
// hold's tag. The Client keeps each tag with the hold's start; its own
// waiters find its holds in memory. For the others, it keeps the tags of
// its current holds with the lock in Redis (a hash "<lock key>:tags",
// removed at release and at Client.Close, gone within one lease of the
// hold's end if its holder died) and records each hold that ends (tag,
// start, end) in the lock's history (a list "<lock key>:taghist" of at
// most 128 holds, each kept at most a minute after its end, Close or not).
// A wait that found the lock held in Redis reads both when it ends, and
// the observer turns what it finds into the links (see
// dsync.AcquireDone.Blockers). Times are the Clients' wall clocks, in µs
// (a released hold's end: Redis's, see below): exact between the
// processes of one machine; between machines an overlap is as exact as
// their clocks agree (NTP: about a millisecond). The hold
// span begins when the hold did (for a Mutex handed on inside its Client,
// at the handoff, which may be before the acquire span ends).
//
// The price, with the observer installed: the tag changes of a lock are
// sent together, one script per lock per millisecond in the background
// (a hold that ends within it never has its tag written: its history
// entry says it all), and ahead of each release of a Mutex, FairMutex or
// RWMutex in Redis, in the release's own pipeline (no round trip of their
// own; a Semaphore's release sends them just before it, one round trip);
// one script per tagged hold per renewal round (in the round's pipeline);
// one round trip when a wait that found the lock held in Redis ends.
// Acquisitions that do not wait cost nothing more. Without the observer,
// dsync does none of it. The uncontended LockContext/UnlockContext cycle
// of a Mutex costs 11 Redis commands and 2 round trips traced, against 6
// and 2 untraced (before issue 37's work on the cost: 21.8 and 4; the
// bench's serial scenario on fefcb6c, 2026-12-04; dsync's
// TestMutexTracedCycleCost holds it).
//
// Under contention the cost is the SDK's, and it is large. With 16
// goroutines of one Client on one Mutex and zero-length holds (the bench's
// contended scenario, every span sampled), a traced acquisition waits
// behind the 15 others, so its acquire span carries 15 blocked_by links;
// the SDK's work for it (two spans started and ended, the 15 links, the
// spans' snapshots) is 13-16 µs of CPU (BenchmarkObserverHooksBlocked),
// while a whole untraced acquisition, handed on inside the Client, takes
// 6-8 µs of wall time (BenchmarkContended16; the bench: 134,000 a
// second). Traced, the run spends about 35 µs of CPU per
// acquisition (its 15.5 KB of allocation, against 0.7 KB, shows in the
// collector's share), against 8 µs untraced, so on 2 cores it cannot run
// above about a third of the untraced rate whatever runs where: the bench
// measured 0.24x (median of 6 -quick runs, dsync-traced against dsync, on
// 984280f, 2026-12-04, 2 shared cores; 0.22x on 72874ff; 0.23x on
// 6c49dea, 3 repeats of the full scenario, 2026-12-04 23:35 UTC);
// BenchmarkContended16 0.20x with the spans ended in the hooks, 0.25x with
// WithBackgroundSpans, 0.41x with one trace in 10 sampled. An acquisition
// that did not wait, and a contended one whose trace is not sampled, build
// no links.
//
// What that costs in truth: a released hold's history entry ends at
// Redis's clock as the entry is written, right before the release in the
// same pipeline, so between machines its end is as exact as Redis's clock
// and the waiter's agree; a Semaphore's hold ends in the history when its
// Release returns (the holder's clock, a round trip late). A release retried after a lost reply (the lock still held
// meanwhile) is short by the retries. A link is never made to a hold that
// did not hold the lock during the wait.
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
//  3. A releases: its hold span ends. B acquires; its acquire span ends
//     with dsync.lock.attempts=2 and a link to the span 00f0… of trace
//     4bf9…, whose dsync.lock.blocked_for is how long of B's wait A held
//     the lock. Had another holder taken the lock in between, B's span
//     would link to both, in order.
//
// In a trace viewer, B's slow request shows the acquire span as the long
// child, and following its link opens A's trace at the hold span: the
// request that held "orders", with its own children showing what it did
// while holding. The attribute dsync.lock.owner names the Client on both
// sides (see dsync.WithClientName), which is enough when tracing is off;
// `dsync inspect` and `dsync top` show the same owners, and for a Mutex
// the Clients waiting for it.
//
// # Attributes
//
// Every attribute the observer records, and where:
//
//	dsync.lock.kind           string  acquire and hold spans, every metric but renewal.failures
//	dsync.lock.mode           string  the same, for primitives with modes ("read", "write")
//	dsync.lock.name           string  the same, only with WithLockNames(true)
//	dsync.lock.permits        int     acquire and hold spans (1 but for a Semaphore)
//	dsync.lock.try            bool    acquire spans
//	dsync.lock.outcome        string  acquire spans, wait.duration, acquisitions
//	dsync.lock.attempts       int     acquire spans
//	dsync.lock.queued         bool    acquire spans that waited in their Client's queue (Mutex)
//	dsync.lock.granted        bool    acquire spans granted by another Client's release (Mutex)
//	dsync.lock.reentered      bool    acquire spans; the dsync.lock.released event
//	dsync.lock.fencing_token  int     acquire spans (when acquired), hold spans
//	dsync.lock.owner          string  acquire and hold spans (never metrics: unbounded)
//	dsync.lock.end            string  hold.duration: "released" or "lost"
//	dsync.lock.cause          string  the dsync.lock.lost event: why the hold was lost
//	dsync.lock.blocked_by     bool    links from an acquire span to a blocking hold span
//	dsync.lock.blocked_for    float   the same links: seconds of the wait the hold held the lock
//	dsync.lock.blockers_dropped int   acquire spans that waited behind over dsync.MaxBlockers holds
//	error.type                string  failed acquisitions (spans, wait.duration,
//	                                  acquisitions); the dsync.lock.renew_failed event
//	exception.message         string  the dsync.lock.renew_failed event
//
// WithAttributeFilter decides on the attributes of spans and metrics; those
// of span events and links are always recorded.
//
// # Metrics
//
// Instruments follow the OpenTelemetry naming conventions; durations are in
// seconds, in explicit buckets from 100 µs to 60 s (DurationBuckets), so
// sub-millisecond, contended and long waits fall in buckets of their own.
//
//	dsync.lock.wait.duration      histogram, s   acquisition time, by outcome
//	dsync.lock.hold.duration      histogram, s   time from acquire to release or loss, by dsync.lock.end
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
