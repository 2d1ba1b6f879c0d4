package dsync

import (
	"context"
	"fmt"
	"time"
)

// The call discipline every primitive follows: checking a call, and
// running it bounded by the caller's context. The rest of it: the one
// spelling of each error (errors.go), cleanups bounded by the caller's
// context and retries of what is safe to repeat (retry.go, background.go),
// and the end of a wait by the caller's context (waitErr, ctxErr:
// engine.go).

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
		return fmt.Errorf("%w: nil context: pass context.Background() if there is none", ErrInvalidArgument)
	}
	if nameErr != nil {
		return nameErr
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	return ctx.Err()
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
