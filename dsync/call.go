package dsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The call discipline every primitive follows: checking a call, the one
// spelling of each error, cleanups bounded by the caller's context, and
// retries of what is safe to repeat.

func (c *Client) checkOpen() error {
	if c == nil {
		// A primitive's zero value has no Client: say so, rather than
		// fail with a nil pointer dereference somewhere deeper.
		panic("dsync: use of a zero-value primitive: create Mutexes, FairMutexes, RWMutexes, Semaphores, Onces and WaitGroups with the Client's New methods")
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// checkCall validates what every call that reaches Redis needs.
func (c *Client) checkCall(ctx context.Context, nameErr error) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if nameErr != nil {
		return nameErr
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	return ctx.Err()
}

// wrapErr names the lock in a Redis error; context errors and the package's
// own errors pass through unchanged so errors.Is keeps working.
func wrapErr(kind Kind, name string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrInvalidArgument) {
		return err
	}
	return fmt.Errorf("dsync: %s %q: %w", kind, shortName(name), err)
}

func shortName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}

// Cleanup budgets: how long a release or an undo may run after the caller's
// context ended. A caller with a deadline gets its answer by the deadline
// plus cleanupGrace; whatever a cleanup could not finish by then is left to
// the lease, which bounds it.
const (
	cleanupTimeout = 2 * time.Second
	cleanupGrace   = 40 * time.Millisecond
)

// ctxErr is ctx.Err(), counting a deadline that has passed as reached even
// before ctx's own timer says so (rueidis times a call out on the deadline
// itself, and can report it first).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// ownErr turns a context error that rueidis returned while the caller's
// context was still live (its own dial or handshake timeout) into a plain
// error, so errors.Is(err, context.DeadlineExceeded) holds only when the
// caller's context ended the call.
func ownErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("dsync: redis connection: %v", err)
	}
	return err
}

// cleanupCtx is the context releases run under after a cancelled or failed
// path: the caller's values without its cancellation, bounded by
// cleanupTimeout, or by the caller's deadline plus cleanupGrace if sooner.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	d := cleanupTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, max(time.Until(dl), 0)+cleanupGrace)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// cleanupNow runs f, a cleanup that is safe to repeat (exact: it can run
// after the caller has gone on, even after the caller acquired again), at
// once with a budget of cleanupGrace; if f did not get an answer, it runs
// again with retries (see idempotent), and a failure then goes to failed,
// if set. f runs on a goroutine of its own; the caller, whose wait ctx
// ended, waits for f's first answer until its deadline plus cleanupGrace
// by the clock (cleanupGrace from now without a deadline), as the cleanup
// budgets promise, and no longer: a call inside rueidis can wait for a
// connection another call is opening whatever its context (see bounded),
// and a deadline seen late on a loaded machine leaves less of the grace.
// In the common case Redis answers at once and the caller returns with
// the cleanup done.
func (c *Client) cleanupNow(ctx context.Context, f func(ctx context.Context) error, failed func(error)) {
	first := make(chan struct{})
	started := c.background(func(bctx context.Context) {
		fctx, cancel := context.WithTimeout(bctx, cleanupGrace)
		err := f(fctx)
		cancel()
		close(first)
		if err == nil || isRedisErr(err) {
			if err != nil && failed != nil {
				failed(err)
			}
			return
		}
		if err := idempotent(bctx, f); err != nil && failed != nil {
			failed(err)
		}
	})
	d := cleanupGrace
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)+cleanupGrace)
	}
	if !started || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
	}
}

// spawn runs f on a goroutine of its own, counted in wg (c.loops), which
// Close waits for, or, with wg nil, as a cleanup (see background). It
// reports false, running nothing, once the Client is closed (a cleanup:
// once Close has drained the cleanups).
func (c *Client) spawn(wg *sync.WaitGroup, f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wg == nil {
		if c.sealed {
			return false
		}
		c.nbg++
		go func() {
			defer c.bgDone()
			f()
		}()
		return true
	}
	if c.closed.Load() {
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
	return true
}

// bgDone ends a cleanup started by spawn.
func (c *Client) bgDone() {
	c.mu.Lock()
	if c.nbg--; c.nbg == 0 && c.bgIdle != nil {
		close(c.bgIdle)
		c.bgIdle = nil
	}
	c.mu.Unlock()
}

// background runs a cleanup on its own goroutine, within cleanupTimeout,
// so that the caller can return by its deadline. It is the one way out of
// everything a call leaves in Redis (a queue place, a grant, an attempt,
// a tag): it still runs while the Client closes, and Close waits for it,
// up to closeTimeout (then its context is cancelled and what is left
// undone expires with its lease). It reports false, running nothing, once
// Close has drained the cleanups.
func (c *Client) background(f func(ctx context.Context)) bool {
	return c.spawn(nil, func() {
		ctx, cancel := context.WithTimeout(c.cleanCtx, cleanupTimeout)
		defer cancel()
		f(ctx)
	})
}

// bounded runs call under ctx and returns its result, or ctx's error once
// ctx has ended, or ErrClosed once the Client closes, whichever comes
// first (once the Client closes it waits for the call's answer, which
// Close bounds). rueidis makes a call that needs a connection another call is
// opening wait for that dial and handshake whatever the waiting call's own
// context (they are bounded by the dialing call's context and the dial
// timeout), so under a network fault a wait inline could return well after
// its context (TestFaultNetworkPrimitives). With a context that can end,
// call runs on a goroutine of its own (Close cancels it and waits for it);
// a result that comes after the caller has gone is dropped, so the caller
// must treat the call as one whose reply was lost (an exact undo).
func bounded[T any](c *Client, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return call(ctx)
	}
	type result struct {
		v   T
		err error
	}
	var zero T
	if c.closed.Load() {
		return zero, ErrClosed // no attempt starts once Close has begun
	}
	ch := make(chan result, 1)
	if !c.spawn(nil, func() {
		cctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.ctx, cancel)
		v, err := call(cctx)
		stop()
		cancel()
		ch <- result{v, err}
	}) {
		return zero, ErrClosed
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
	case <-c.done:
		// Closing: wait for the answer (Close cancels the call once the
		// calls in progress have had closeTimeout), so that what the call
		// did is taken back by the ordinary way out (a queue's leave, a
		// hold's release), not by an undo that leaves its mark behind.
		select {
		case r := <-ch:
			return r.v, r.err
		case <-ctx.Done():
		}
	}
	select {
	case r := <-ch: // it answered as ctx ended: keep the answer
		return r.v, r.err
	default:
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	return zero, ErrClosed
}

// connDoubtSpan is how long after a call failed without a reply (see
// sharedDial) a Client's calls may meet a dial under way: rueidis opens a
// broken connection again at the next call that needs it, and the dial
// and its handshake take up to its dial timeout (5 s by default).
const connDoubtSpan = 10 * time.Second

// inDoubt reports whether a call under ctx should run bounded (see
// bounded): ctx can end, and a call failed without a reply within
// connDoubtSpan, so a dial may be under way. A healthy Client pays one
// atomic load and runs its calls inline. Not covered: a connection that
// broke while no call of the Client was in flight (nothing failed) and
// that the next call opens again: calls that need it meanwhile wait for
// that dial unbounded; the dialing call is bounded by its own context,
// and once a dial fails, the calls after it run bounded.
func (c *Client) inDoubt(ctx context.Context) bool {
	d := c.connDoubt.Load()
	return d != 0 && ctx.Done() != nil && time.Now().UnixNano()-d < int64(connDoubtSpan)
}

// compact returns m, or, when m is down to a quarter of its peak size and
// that peak was large, a copy sized for what is left. Go maps never give
// back the buckets of deleted entries: without this a burst of 100,000
// locks would keep its maps' memory for the Client's life. Call it after
// every insertion (it records the peak) and deletion; the copy costs O(n)
// once per peak/4 deletions, so O(1) amortized.
func compact[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	if n > *peak {
		*peak = n
		return m
	}
	if *peak < 1024 || n > *peak/4 {
		return m
	}
	fresh := make(map[K]V, n)
	for k, v := range m {
		fresh[k] = v
	}
	*peak = n
	return fresh
}

// dropMarker deletes the attempt marker of an acquisition whose reply
// arrived: only a lost reply needs it (for the exact undo), so no key of
// the acquisition outlives it. Off the caller's path; a marker the delete
// misses expires with its lease.
func (c *Client) dropMarker(marker string) {
	if marker == "" {
		return
	}
	c.background(func(ctx context.Context) {
		_ = c.rc.Do(ctx, c.rc.B().Del().Key(marker).Build()).Error()
	})
}

// releaseCtx is the context a release runs under: ctx itself, or, if ctx
// had already ended when the release was called (a lost lock's context, a
// wait deadline long past), ctx without its cancellation, so the release is
// not cut to the short budget meant for callers still waiting on a deadline.
func releaseCtx(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// leaseMS formats a duration as whole milliseconds, at least 1.
func leaseMS(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// timerLateness is how late the lease-clock timer may fire and its
// cancellation be seen on a loaded machine: measured 1-4 ms with the test
// suite alone on 2 vCPUs (up to 9 ms with two suites at once), so 1 ms
// let a holder believe in a lease Redis had already ended.
const timerLateness = 5 * time.Millisecond

// validity is how long after an acquire or renewal was sent the hold is
// still certainly ours: the lease, less an allowance for clock drift between
// this process and Redis (1%, as in Redlock) and for timer lateness.
func validity(lease time.Duration) time.Duration {
	return lease - lease/100 - timerLateness
}

// backoff returns the wait before retry n (n >= 1) after a Redis error.
func backoff(n int) time.Duration {
	d := 10 * time.Millisecond << min(n-1, 7)
	return min(d, time.Second)
}

// sleepCtx waits d, or until ctx is done or the Client closes.
func (c *Client) sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

// idempotent runs call, a script that is safe to repeat, until it gets an
// answer from Redis: first under ctx while ctx is live (no allocation in the
// common case), then, if ctx ended or the reply was lost, again under
// cleanupCtx(ctx) with a growing pause (10 ms, 20 ms, ...) until that ends,
// since a release must not be abandoned because the caller's context ended
// or because a cluster's topology changed under it (rueidis learns a new
// master up to a second after its first failed call).
func idempotent(ctx context.Context, call func(context.Context) error) error {
	if ctx.Err() == nil {
		err := call(ctx)
		if err == nil || isRedisErr(err) {
			return err
		}
	}
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	var err error
	for n := 1; ; n++ {
		if err = call(cctx); err == nil || isRedisErr(err) || cctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff(n))
		select {
		case <-t.C:
		case <-cctx.Done():
			t.Stop()
			return err
		}
	}
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
