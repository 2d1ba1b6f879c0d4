package dsync

import (
	"context"
	"time"
)

// Retries and cleanups: the backoff after a Redis error, the retry of what
// is safe to repeat, the cleanup budgets, and the contexts releases and
// cleanups run under.

// Cleanup budgets: how long a release or an undo may run after the caller's
// context ended. A caller with a deadline gets its answer by the deadline
// plus cleanupGrace; whatever a cleanup could not finish by then is left to
// the lease, which bounds it.
const (
	cleanupTimeout = 2 * time.Second
	cleanupGrace   = 40 * time.Millisecond
)

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

// directCtx is the context of a call that rueidis should answer on the
// caller's goroutine: ctx itself if it has a deadline or cannot be
// cancelled, else ctx's values without its cancellation. rueidis (v1.0.79,
// pipe.Do) sends a call under a cancellable context without a deadline
// through its pipelining goroutines, and the connection stays there for
// good: every later call of the process pays for the hand-over. Such a
// call is bounded by rueidis' own timeouts (ClientOption.ConnWriteTimeout)
// instead of by ctx's cancellation.
func directCtx(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok || ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
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
