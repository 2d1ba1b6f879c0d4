package dsync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A waitProto is one acquisition's conversation with Redis, as a
// primitive describes it to waitLoop, the one wait loop of every primitive
// (Mutex, FairMutex, RWMutex, Semaphore, Once, WaitGroup, RedLock): what an attempt sends and
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

// A subscriber is a waitProto (marked by subscribeFirst) whose wait
// subscribes before its first attempt, not after the first that found
// it must wait: the waits of a WaitGroup, where waiting is the rule, so
// that the look just after subscribing is the first look.
type subscriber interface{ subscribeFirst() }

// A sharedGrants wait (a Mutex's; marked by grantsShared) is granted
// the lock on a channel that every Client's waits share: a message that
// is not its grant wakes it only if it grants nobody (see
// notifier.deliver).
type sharedGrants interface{ grantsShared() }

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
//
// With a nil c the wait spans several Clients (RedLock, one Client per
// node): no one Client's Close ends it (an attempt finds the Clients it
// uses closed, and says so with its error, returned as it is), no message
// wakes it (ch and id are ""), and between attempts it waits the last
// attempt's hint alone.
func waitLoop[P waitProto](c *Client, ctx context.Context, ch, id string, try bool, p P) (attempts int, err error) {
	w := wakeup{c: c, ch: ch, id: id}
	_, w.all = any(p).(sharedGrants)
	defer w.close()
	if _, sf := any(p).(subscriber); sf && !try {
		// A wait that nearly always waits (WaitGroup) subscribes before
		// its first look, which then sees everything: one look, not two.
		w.subscribe(ctx)
	} else if id != "" && !try && c.notify.isLive(ch) {
		// Subscribed already: register now, so that a grant right after
		// the attempt finds the wait. (Not subscribed: the subscription
		// after the attempt is fresh, and the loop looks again.)
		w.register()
	}
	for n := 1; ; n++ {
		if n > 1 && c != nil && c.closed.Load() {
			// Closing: no attempt after Close began; the wait leaves as
			// one that gave up (Client.Close waits for it).
			p.gaveUp()
			return n - 1, ErrClosed
		}
		if err := ctxErr(ctx); err != nil {
			// Ended before this look (as the wait was woken, or before
			// the first): every look before was answered, so none is in
			// flight, and none is sent now (it would be abandoned, and
			// undone for nothing). After a look the wait leaves as one
			// that gave up; before the first, nothing was sent, and
			// there is nothing to give up.
			if n > 1 {
				p.gaveUp()
			}
			return n - 1, c.waitErr(ctx, err)
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
		if err := w.wait(ctx, hint); err != nil {
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
// says so). A wait over several Clients (c nil, see waitLoop) ends with
// its attempt's error as it is.
func (c *Client) waitErr(ctx context.Context, err error) error {
	if c == nil {
		return err
	}
	if e := ctxErr(ctx); e != nil {
		return e
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return ownErr(err)
}

// ctxErr is ctx.Err(), counting a deadline that has passed as reached even
// before ctx's own timer says so (rueidis times a call out on the deadline
// itself, and can report it first). waitErr ends a wait with it; a few
// calls outside the wait loop test it too.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// A wakeup is a waiter's side of the notifier between two looks at a lock:
// it holds the subscription and the fallback timer every wait loop needs.
// The zero value (with c and ch set) is ready; close it when done. With a
// nil c (a wait over several Clients, see waitLoop) it never subscribes and
// waits the hint alone. waitLoop is its one user.
type wakeup struct {
	c     *Client
	ch    string
	id    string // the wait's id on a channel of grants, or ""
	all   bool   // the channel is shared by every Client's waits (sharedGrants)
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
	w.sub = w.c.notify.register(w.ch, w.id, w.all)
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
		w.sub = w.c.notify.register(w.ch, w.id, w.all)
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
	if c := w.c; c != nil && w.live && c.cfg.test.waitParked != nil {
		c.cfg.test.waitParked(w.ch, true)
		defer c.cfg.test.waitParked(w.ch, false)
	}
	select {
	case <-sig:
		return nil
	case <-w.timer.C:
		if c := w.c; c != nil && w.live && c.cfg.test.fallbackPolled != nil {
			c.cfg.test.fallbackPolled(w.ch, d)
		}
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

// acqCode is the code an acquire script's reply starts with
// (mutex_acquire.lua, fair_acquire.lua, rw_acquire.lua, sem_acquire.lua).
type acqCode int64

const (
	// acqSizeMismatch: {-1, size}, the Semaphore is stored with another
	// size (sem_acquire.lua).
	acqSizeMismatch acqCode = -1
	// acqWaiting: {0, hint ms[, server µs]}, the lock is taken (hint: how
	// long the state found may last at most), or {0, 0}: the attempt was
	// undone first and did nothing.
	acqWaiting acqCode = 0
	// acqLate: {-2, server µs}, a Mutex attempt sent as the owner
	// alone ran after the owner's deadline and did nothing
	// (mutex_acquire.lua, srvclock.go).
	acqLate acqCode = -2
	// acqAcquired: {1, token}, acquired (mutex_acquire.lua replies the bare
	// token: appendInts reads it as {1, token}).
	acqAcquired acqCode = 1
	// acqReentered: {2, token}, the owner held it already: only its count
	// in Redis grew.
	acqReentered acqCode = 2
	// acqGranted: {3, token}, a release granted it to this wait, which
	// claimed the grant (FIFO locks).
	acqGranted acqCode = 3
)

// acqReply is an acquire script's reply, decoded: code, then value, the
// token, the hint in ms or the stored size by the code, then the server
// time of a waiting reply in µs (0: not sent). The zero acqReply is the
// reply of no attempt: waiting, nothing held.
type acqReply struct {
	code  acqCode
	value int64
	srvUS int64
}

// decodeAcq decodes the reply of an acquire script, {code, value} or
// {code, value, server µs}; ok is false for any other length (a missing
// reply: the zero acqReply).
func decodeAcq(vals []int64) (r acqReply, ok bool) {
	switch len(vals) {
	case 3:
		r.srvUS = vals[2]
		fallthrough
	case 2:
		r.code, r.value = acqCode(vals[0]), vals[1]
		return r, true
	}
	return r, false
}

// held reports whether the reply says the attempt holds the lock (acquired,
// re-entered or granted).
func (r acqReply) held() bool { return r.code > acqWaiting }

// token is the fencing token of a reply that holds the lock.
func (r acqReply) token() uint64 { return uint64(r.value) }

// hint is how long the state a waiting reply found may last at most.
func (r acqReply) hint() time.Duration { return time.Duration(r.value) * time.Millisecond }

// srvAt is the server time of a waiting reply in µs (0: unknown).
func (r acqReply) srvAt() uint64 { return uint64(max(r.srvUS, 0)) }

// execAcquire runs an acquire script, whose reply is {code, value} with a
// code other than 0 when it acquired (acqReply). With WithReplicaSync it is followed
// by WAIT on the same connection, since WAIT counts only the writes of its
// own connection. When the script acquired but too few replicas
// acknowledged, or WAIT's reply is missing, it returns the script's reply
// with an error wrapping ErrNotReplicated, which is not a Redis error: the
// caller must undo the acquisition.
func (c *Client) execAcquire(ctx context.Context, lc *lockConfig, l *rueidis.Lua, keys, args []string) ([]int64, error) {
	return c.execAcquireInto(ctx, lc, l, keys, args, nil)
}

// execAcquireInto is execAcquire appending the reply to dst, so that a
// caller with room for it allocates nothing for the reply.
func (c *Client) execAcquireInto(ctx context.Context, lc *lockConfig, l *rueidis.Lua, keys, args []string, dst []int64) ([]int64, error) {
	if lc.replicas == 0 {
		return appendInts(dst, c.runScript(ctx, l, keys, args))
	}
	l = c.lua(l)
	sha, _ := scripts.SHA1(l)
	var vals []int64
	var acks int64
	err := c.rc.Dedicated(func(dc rueidis.DedicatedClient) error {
		wait := func() rueidis.Completed {
			return dc.B().Wait().Numreplicas(int64(lc.replicas)).Timeout(lc.replicaTimeout.Milliseconds()).Build()
		}
		res := dc.DoMulti(ctx, dc.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		if err := res[0].Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			eval := dc.B().Eval().Script(scripts.Source(l)).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
			res = dc.DoMulti(ctx, eval, wait())
		}
		var err error
		if vals, err = appendInts(dst, res[0]); err != nil {
			vals = nil
			return err
		}
		acks, err = res[1].AsInt64()
		return err
	})
	r, _ := decodeAcq(vals)
	acquired := len(vals) >= 2 && r.held()
	switch {
	case err != nil && acquired:
		return vals, fmt.Errorf("%w: %v", ErrNotReplicated, err)
	case err != nil:
		return nil, err
	case acquired && acks < int64(lc.replicas):
		return vals, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acks, lc.replicas, lc.replicaTimeout)
	}
	return vals, nil
}

// appendInts appends an array reply of integers to dst (AsIntSlice without
// its allocation when dst has room). A bare integer n, an acquire script's
// reply for "acquired with token n" (mutex_acquire.lua: the cheapest reply
// to build and to read), appends {1, n}; "- n", "acquired with token n,
// the server clock", {1, n, n}.
func appendInts(dst []int64, r rueidis.RedisResult) ([]int64, error) {
	msg, err := r.ToMessage()
	if err != nil {
		return nil, err
	}
	if msg.IsInt64() {
		n, _ := msg.AsInt64()
		return append(dst, 1, n), nil
	}
	if s, err := msg.ToString(); err == nil && len(s) > 2 && s[:2] == "- " {
		// "- <token>": acquired, the token being the server clock
		// (mutex_acquire.lua's one-argument form): {1, token, token}, the
		// third the server's µs.
		n, err := strconv.ParseInt(s[2:], 10, 64)
		if err != nil {
			return nil, err
		}
		return append(dst, 1, n, n), nil
	}
	arr, err := msg.ToArray()
	if err != nil {
		return nil, err
	}
	for _, v := range arr {
		n, err := v.AsInt64()
		if err != nil {
			return nil, err
		}
		dst = append(dst, n)
	}
	return dst, nil
}
