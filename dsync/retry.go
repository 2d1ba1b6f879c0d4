package dsync

import (
	"context"
	"time"
)

// Retries: the backoff after a Redis error, and the retry of what is safe
// to repeat.

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
