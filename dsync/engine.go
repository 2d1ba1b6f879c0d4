package dsync

import (
	"context"
	"time"
)

// A waitProto is one acquisition's conversation with Redis, as a
// primitive describes it to waitLoop, the one wait loop of every primitive
// (Mutex, FairMutex, RWMutex, Semaphore, Once): what an attempt sends and
// how it is undone are the primitive's; when to look again, how to wait
// and how an error ends the wait are the loop's.
//
// Implementations are small struct values pointing at the acquisition's
// state: waitLoop is instantiated per type, so its calls are direct and
// the state can stay on the caller's stack.
type waitProto interface {
	// attempt sends attempt n. It reports whether the wait is over (the
	// lock is held, or a Once's result is there) and, if not, how long
	// the state it found may last at most (< 0: unknown).
	attempt(ctx context.Context, n int) (over bool, hint time.Duration, err error)
	// failed is called once with the error that ends the wait when an
	// attempt failed: if it is not Redis's own, the attempt may have run
	// with its reply lost (or acquired without the replicas'
	// acknowledgement), and failed must undo exactly that attempt.
	failed(err error)
	// waiting is called after each attempt that found the lock taken,
	// before the loop waits.
	waiting()
	// gaveUp is called when ctx or Close ends a wait between attempts.
	gaveUp()
	// granted is called when a release granted the lock to this wait
	// (a message for its id carried the token): it reports whether the
	// wait is over.
	granted(token uint64) bool
}

// waitLoop runs p until an attempt ends the wait, ctx is done, the Client
// closes or Redis fails. Between attempts it waits for a message on ch, or
// at most the last attempt's hint or lease/3, in case the message was
// lost; just after subscribing it looks again at once, since the release
// may have come before the subscription. With try it makes one attempt.
//
// With an id, ch carries grants: a release that makes this wait the
// holder says so in a message for id (FIFO locks), and the wait is
// registered for it before its first attempt when the channel is
// subscribed, so that no grant published after that attempt is missed.
func waitLoop[P waitProto](c *Client, ctx context.Context, ch, id string, try bool, p P) (attempts int, err error) {
	w := wakeup{c: c, ch: ch, id: id}
	defer w.close()
	if id != "" && !try && c.notify.isLive(ch) {
		// Subscribed already: register now, so that a grant right after
		// the attempt finds the wait. (Not subscribed: the subscription
		// after the attempt is fresh, and the loop looks again.)
		w.register()
	}
	for n := 1; ; n++ {
		if n > 1 && c.closed.Load() {
			// Closing: no attempt after Close began; the wait leaves as
			// one that gave up (Client.Close waits for it).
			p.gaveUp()
			return n - 1, ErrClosed
		}
		w.drain()
		over, hint, err := p.attempt(ctx, n)
		if err != nil {
			p.failed(err)
			return n, c.waitErr(ctx, err)
		}
		if over || try {
			return n, nil
		}
		p.waiting()
		if w.subscribe(ctx) {
			continue
		}
		if err := w.wait(ctx, hint, n); err != nil {
			p.gaveUp()
			return n, err
		}
		if tok := w.granted(); tok != 0 && p.granted(tok) {
			return n, nil
		}
	}
}

// waitErr is the one spelling of an error that ends a wait: the caller's
// context's, ErrClosed, or Redis's (a timeout of rueidis' own, not ctx's,
// says so).
func (c *Client) waitErr(ctx context.Context, err error) error {
	if e := ctxErr(ctx); e != nil {
		return e
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return ownErr(err)
}
