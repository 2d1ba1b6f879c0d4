package dsync

import (
	"context"
	"time"
)

// Contexts: the cleanup budgets, and the contexts releases and cleanups
// run under.

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
