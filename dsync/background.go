package dsync

import (
	"context"
	"sync"
	"time"
)

// Goroutines of a Client: the one way to start one (spawn), and cleanups
// that run off the caller's path (background).

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

// dropMarker deletes the attempt marker of an acquisition whose reply
// arrived: only a lost reply needs it (for the exact undo), so no key of
// the acquisition outlives it. Off the caller's path, and retried as the
// other cleanups are (idempotent: the name is the attempt's alone), so
// that Close, which waits for the cleanups, leaves none behind; a marker
// the delete still misses (Redis cut off until closeTimeout) expires with
// its lease.
func (c *Client) dropMarker(marker string) {
	if marker == "" {
		return
	}
	c.background(func(ctx context.Context) {
		_ = idempotent(ctx, func(ctx context.Context) error {
			return c.rc.Do(ctx, c.rc.B().Del().Key(marker).Build()).Error()
		})
	})
}
