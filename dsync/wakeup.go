package dsync

import (
	"context"
	"time"
)

// A wakeup is a waiter's side of the notifier between two looks at a lock:
// it holds the subscription and the fallback timer every wait loop needs.
// The zero value (with c and ch set) is ready; close it when done. With a
// nil c (a wait over several Clients, see waitLoop) it never subscribes and
// waits the hint alone.
type wakeup struct {
	c     *Client
	ch    string
	id    string // the wait's id on a channel of grants, or ""
	sub   *subscription
	live  bool
	timer *time.Timer
	// down counts the subscribes in a row that failed (the loop was
	// reconnecting): the polling backs off with it.
	down int
}

// register registers the wait for its grant before the attempt that may
// queue it, so that a grant published right after that attempt finds it.
// If the channel is already subscribed, subscribe then has nothing to do
// and the loop need not look again.
func (w *wakeup) register() {
	w.sub = w.c.notify.register(w.ch, w.id)
	w.live = true // the caller saw it subscribed; subscribe checks again
}

// granted returns the token of a grant delivered to this wait (0: none)
// and the grant's server time in µs (0: unknown), once.
func (w *wakeup) granted() (tok, at uint64) {
	if w.sub == nil {
		return 0, 0
	}
	return w.sub.takeGrant()
}

// subscribe makes sure the waiter is subscribed to ch. It reports true when
// it has just subscribed: the caller should look again at once, since the
// release may have come before the subscription.
func (w *wakeup) subscribe(ctx context.Context) (fresh bool) {
	if w.c == nil {
		return false
	}
	if w.sub != nil && w.live && w.c.notify.isLive(w.ch) {
		return false
	}
	if w.sub == nil {
		w.sub = w.c.notify.register(w.ch, w.id)
	}
	w.sub, w.live = w.c.notify.listen(ctx, w.sub)
	if w.live {
		w.down = 0
	} else {
		w.down++
	}
	return w.live
}

// drain discards a pending signal; call it before each look.
func (w *wakeup) drain() {
	if w.sub != nil {
		w.sub.drain()
	}
}

// wait blocks until a message or a reconnect signals the subscription, or
// the fallback delay runs out: hint (how long the holder's lease has left;
// < 0 when unknown), but at most lease/3, in case a message was lost, and
// while not subscribed a growing backoff. It returns ctx.Err() or ErrClosed
// when the wait must end instead. Without a Client (c nil) the delay is
// the hint alone.
func (w *wakeup) wait(ctx context.Context, hint time.Duration) error {
	d := hint
	var done <-chan struct{}
	if c := w.c; c != nil {
		done = c.done
		d = c.cfg.lease / 3
		if hint >= 0 && hint < d {
			d = hint
		}
		if !w.live {
			// By the failed subscribes in a row, not by attempt: a wait
			// that looked many times before its subscription broke polls
			// soon.
			d = min(d, backoff(max(w.down, 1)))
		}
	}
	d = max(d, time.Millisecond)
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	var sig <-chan struct{}
	if w.sub != nil {
		sig = w.sub.C
	}
	select {
	case <-sig:
		return nil
	case <-w.timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return ErrClosed
	}
}

func (w *wakeup) close() {
	w.sub.close()
	if w.timer != nil {
		w.timer.Stop()
	}
}
