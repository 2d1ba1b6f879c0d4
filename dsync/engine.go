package dsync

import (
	"context"
	"fmt"
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
	// (a message for its id carried the token, and at, the grant's
	// server time in µs, or 0 when the message did not say): it reports
	// whether the wait is over. It is not over when the grant's lease
	// may have run out, or nearly, by the time it was seen, or when it
	// came before the last attempt (which found it gone: see grantStart):
	// then the loop attempts again at once, and that attempt claims the
	// grant if Redis still has it (restarting its lease) or goes on
	// waiting.
	granted(token, at uint64) bool
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
		if tok, at := w.granted(); tok != 0 && p.granted(tok, at) {
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

// grantStart returns when the lease clock of a grant seen now may start:
// a local time no later than the grant, when the lease began in Redis.
// sentAt is when the wait's last attempt was sent and srvAt that attempt's
// server time in µs (from its reply; 0: unknown); at is the grant's (0:
// unknown). The attempt ran on the server after sentAt, so the grant came
// at least at-srvAt of server time after sentAt; 1/100 of that gap is
// taken off for the two clocks' rates, as validity does for the lease,
// and the start is never after now, when the grant was seen.
//
// ok is false when the grant cannot be dated after the last attempt: a
// time is missing (a script of an older version), or the grant came
// before the attempt. Such a grant may be one the waiter outlived: its
// message was read only after a later attempt (the process was frozen
// past the grant's lease, and at the thaw its fallback timer fired before
// the message was read), and that attempt, which claims a grant Redis
// still has, did not find it, since it had lapsed and may be another
// owner's now. It must not be returned as it is: the wait claims it
// again with an attempt.
func grantStart(sentAt, now time.Time, srvAt, at uint64) (start time.Time, ok bool) {
	if srvAt == 0 || at <= srvAt {
		return time.Time{}, false
	}
	gap := time.Duration(at-srvAt) * time.Microsecond
	start = sentAt.Add(gap - gap/100)
	if start.After(now) {
		return now, true
	}
	return start, true
}

// grantClock is what a wait that a release granted does with the grant:
// the start of its lease clock (grantStart) and whether the grant is
// returned as it is (grantLive) or claimed again by the next attempt
// (live false: also a grant grantStart cannot date).
func grantClock(sentAt time.Time, srvAt, at uint64, lease time.Duration) (time.Time, bool) {
	now := time.Now()
	start, ok := grantStart(sentAt, now, srvAt, at)
	return start, ok && grantLive(start, now, lease)
}

// grantLive reports whether a grant whose lease clock starts at start is
// worth returning as it is at now: at least half the lease's validity is
// left. If not, the wait claims it again with an attempt, which restarts
// its lease in Redis if it is still there (a lease that has run out on
// the local clock may not have in Redis) and goes on waiting if not: no
// acquisition returns a lock context whose lease is already over.
func grantLive(start, now time.Time, lease time.Duration) bool {
	v := validity(lease)
	return start.Add(v).Sub(now) >= v/2
}

// leaseSpent returns the error of an acquisition whose lease, counted from
// sentAt (the attempt's send time, or a grant's start), has already run
// out on the local clock: its reply came back later than the lease (a
// lease shorter than the round trip, or a process paused meanwhile), so
// its lock context would be cancelled on return. The caller releases what
// the attempt acquired and returns the error (Lock retries it); nil when
// the lease is still running.
func leaseSpent(sentAt time.Time, lease time.Duration) error {
	took := time.Since(sentAt)
	if took < validity(lease) {
		return nil
	}
	return fmt.Errorf("%w: the lease of %v ran out before the acquisition's reply came back (after %v), and the lock was released; use a longer lease", ErrLockLost, lease, took.Round(time.Millisecond))
}
