package dsync

import (
	"context"
	"errors"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// passOnLocked ends hold h (removed from st.h, no acquisitions left): it
// hands the lock to the next local waiter, or releases it in Redis and lets
// the next local waiter compete. Called with st.mu held; unlocks it. It
// hands back h's reference to st (see getMutex). It ends h as released
// under st.mu (a local handoff), but as lost only after st.mu is unlocked
// (see locking.go).
//
// An acquisition in Redis made while goroutines of this Client wait, and
// every handoff through Redis, reserves m.block fencing tokens (the value
// records the last, and is marked " b": see mutex_acquire.lua), so the next
// m.block-1 handoffs inside this Client need no round trip: the new holder
// takes the next token and the same hold in Redis. When the block runs out,
// a handoff script reserves the next one in one round trip, and first asks
// Redis whether other processes wait (a waiter of theirs found the lock
// held and marked it, and they are subscribed to the lock's channel); if
// so it releases the lock to them instead: the yield, after which this
// Client's next waiter holds back yieldWait, so that theirs takes it
// first. Without waiters elsewhere the lock keeps passing locally; every 8
// blocks (the hard cap) the check asks for the mark alone, in case a
// waiter could not subscribe. A subscription alone is no wait (a Client
// stays subscribed a while after its waits), and neither is the cap: the
// lock is not left free, nor a local waiter held back, for nobody.
//
// A handoff without a round trip also needs the hold confirmed in Redis
// (acquired, handed over or renewed) less than lease/30 ago
// (confirmedWithin); else it goes through the handoff script, which checks
// the key. So after Redis loses the lock (FLUSHALL, a restart without
// persistence), a Client grants it locally only until lease/30 after the
// send time of its last command that Redis processed before the loss, or
// until its block runs out, whichever is sooner. The price: one handoff
// script per lease/30 while the lock keeps passing inside the Client (1 s
// at the default lease), beside one per block.
//
// A hold found lost on the way ends with ErrLockLost, not as released, and
// the waiter goes to Redis: one whose lease clock ran out or that a renewal
// found gone is not handed on without a round trip (hold.handOff), and one
// that the handoff or release script finds gone from Redis (FLUSHALL, a
// restart, an expiry) is lost; the release then returns ErrNotHeld.
//
// Whatever it sends to Redis waits first for a renewal round's session
// batches in flight (afterRenewal, see renewer.takeOff).
func (m *Mutex) passOnLocked(ctx context.Context, st *mutexState, h *hold) error {
	c := m.c
	defer c.putMutex(m.sk(), st) // the hold's reference
	h.beginRelease()
	bound := c.cfg.handoffs
	if c.closed.Load() {
		// Closing: no new hold can start here (track refuses), so the lock
		// goes back to Redis with the release script (the owner and token
		// Redis names), which wakes the other processes' waiters.
		bound = 0
	}
	if len(st.queue) > 0 && bound > 0 && st.passes < 8*bound && st.tokenDueLocked() && h.confirmedWithin(m.lease()) {
		// A token from the block reserved in Redis: no round trip. The new
		// hold is the same hold in Redis, so it takes over its lease clock.
		w := st.queue[0]
		st.queue = st.queue[1:]
		w.woken = true
		nh := m.newHold(w.owner, st.next)
		nh.rOwner, nh.rToken = h.rOwner, h.rToken
		// Hand over and read h's lease clock in one step: a renewal reply
		// after it reaches nh, which keeps it for trackUntil; one that
		// found the lock gone before it refuses the handoff.
		deadline, ok := h.handOff(nh)
		if ok {
			st.passes++
			st.next++
			if nh.trackUntil(deadline) {
				h.end(errReleased, false)
				st.h = nh
				w.ch <- nh
				st.shareHoldLocked(nh) // other waiters of the same owner re-enter
				st.mu.Unlock()
				return nil
			}
		}
		// Lost (before the handoff, or nh since: trackUntil), or closed
		// meanwhile: the waiter goes to Redis.
		st.busy = true
		st.passes = 0
		w.ch <- nil
		st.mu.Unlock()
		if !ok || nh.isEnded() {
			h.end(h.lostCause("it was found lost (its lease clock ran out, or a renewal found it gone) as it was handed on"), true)
			return ErrNotHeld
		}
		// Closed meanwhile: nh never started, so the hold in Redis is still
		// h's, which nobody else releases now (Close may have taken its
		// list of holds already): release it, as Close would have.
		if m.afterRenewal(ctx, h) == nil {
			_, _ = m.release(ctx, h.rOwner, h.rToken, nh.token)
		}
		h.end(errReleased, false)
		return ErrClosed
	}
	// A handoff through Redis reserves a new block; with blocks each is a
	// yield check, without them every bound-th; at the hard cap the check
	// asks only whether another Client marked the lock as waited for.
	check := checkNone
	switch {
	case bound == 0:
	case st.passes >= 8*bound:
		check = checkCap
	case m.block > 1 || (st.passes > 0 && st.passes%bound == 0):
		check = checkSubscribed
	}
	if len(st.queue) > 0 && bound > 0 && !h.isEnded() {
		w := st.queue[0]
		st.queue = st.queue[1:]
		w.woken = true
		st.busy = true
		st.passes++
		if check == checkCap {
			st.passes = 0 // the cap is checked again 8 blocks on
		}
		st.mu.Unlock()
		c.testEvent(check.event())
		var nh *hold
		var yielded bool
		err := m.afterRenewal(ctx, h)
		if err == nil {
			nh, yielded, err = m.handoff(ctx, h, w.owner, check, c.tagsBefore(h))
		} else {
			err = wrapErr(KindMutex, m.info.Name, err)
		}
		if errors.Is(err, ErrNotHeld) {
			// Not held in Redis any more: lost (FLUSHALL, a restart, an
			// expiry), not released.
			h.end(h.lostCause(whyHandoff), true)
		} else {
			if nh != nil {
				h.mu.Lock()
				h.kept = true
				h.mu.Unlock()
			}
			h.end(errReleased, false)
		}
		st.mu.Lock()
		st.busy = false
		switch {
		case nh != nil:
			st.h = nh
			st.reservedLocked(nh)
			w.ch <- nh
			st.shareHoldLocked(nh) // other waiters of the same owner re-enter
		case yielded:
			// Back to the head of the queue, to compete after the others.
			c.testEvent("yield")
			w.woken = false
			st.queue = append([]*mutexWaiter{w}, st.queue...)
			st.passes = 0
			st.yielded = h.token // the yield's marker: "- <h.token> 0"
			st.wakeNextLocked()
		default:
			// Not handed over: the waiter acquires through Redis.
			st.busy = true
			w.ch <- nil
		}
		st.mu.Unlock()
		return err
	}
	st.busy = true
	st.passes = 0
	tag := st.tagForLocked(h)
	st.mu.Unlock()
	var code int64
	err := m.afterRenewal(ctx, h)
	if err == nil {
		code, err = m.releaseTagged(ctx, h.rOwner, h.rToken, h.token, tag, c.tagsBefore(h))
	}
	var ended bool
	if err == nil && code == 0 {
		ended = h.end(h.lostCause(whyHandoff), true) // gone from Redis: lost, not released
	} else {
		ended = h.end(errReleased, false)
	}
	st.mu.Lock()
	st.busy = false
	st.wakeNextLocked()
	st.mu.Unlock()
	if err == nil && (code == 0 || !ended) {
		err = ErrNotHeld
	}
	return wrapErr(KindMutex, m.info.Name, err)
}

// afterRenewal waits until no renewal round's session batch is in flight
// (see renewer.takeOff) before a release of h, being released
// (beginRelease), writes to Redis; or until ctx ends, whose error it
// returns: the release is then not sent. (Only a watchdog hold is renewed
// through the session: sessionHold.)
func (m *Mutex) afterRenewal(ctx context.Context, h *hold) error {
	if !h.watchdog {
		return nil
	}
	f := m.c.renew.flight.Load()
	if f == nil {
		return nil
	}
	if hook := m.c.cfg.test.releaseAwaits; hook != nil {
		hook()
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// yieldCheck is what a handoff through Redis asks before it hands over
// (scripts.AppendMutexHandoffArgs's yield, mutex_handoff.lua's ARGV[5]).
type yieldCheck int

const (
	// checkNone: hand over.
	checkNone yieldCheck = iota
	// checkSubscribed: yield if another Client marked the lock as waited
	// for (" w") and is subscribed to its channel, where its waiter learns
	// of the yield. In a cluster without sharded pub/sub, PUBSUB NUMSUB
	// sees one node's subscribers only: there the mark alone decides, as
	// for checkCap.
	checkSubscribed
	// checkCap: the hard cap: yield if another Client marked the lock,
	// subscribed or not (its waiter may have failed to subscribe and
	// poll).
	checkCap
)

// event names the check for the Client's test hook.
func (k yieldCheck) event() string {
	switch k {
	case checkSubscribed:
		return "check"
	case checkCap:
		return "cap"
	}
	return "handoff"
}

// handoff moves the lock from hold h to owner to in one script and returns
// the new hold; with a check, it yields instead if other processes wait
// (see yieldCheck). It returns nil with the reason if it could do neither:
// ErrNotHeld when h's hold was gone from Redis (lost). pre, if not nil,
// are the hold-tag changes to send ahead of the script in its pipeline
// (Client.tagsBefore).
func (m *Mutex) handoff(ctx context.Context, h *hold, to string, check yieldCheck, pre *tagBatch) (nh *hold, yielded bool, err error) {
	c := m.c
	lease := m.lease()
	own := "-1"
	switch {
	case check == checkCap || check == checkSubscribed && c.cluster && !c.sharded:
		own = "w"
	case check == checkSubscribed:
		own = "0"
		if c.notify.isLive(m.ch()) {
			own = "1"
		}
	}
	args := scripts.AppendMutexHandoffArgs(nil, h.rOwner, h.rToken, to, m.leaseArg, own, m.c.args.mark, m.blockArg, h.token)
	var vals []int64
	var sentAt time.Time
	err = idempotent(ctx, func(ctx context.Context) (err error) {
		sentAt = time.Now()
		vals, err = c.execAfter(ctx, &pre, scripts.MutexHandoff, m.relKeys(), args).AsIntSlice()
		return err
	})
	c.finishTags(pre)
	if err != nil {
		return nil, false, wrapErr(KindMutex, m.info.Name, err)
	}
	r := decodeHandoff(vals)
	if r.code == handoffYielded {
		return nil, true, nil
	}
	if r.code != handoffPassed {
		// h was not this owner's alone (lost, or re-entered through another
		// Client): release our part normally. If the release finds nothing
		// of ours either, the lock was lost: ErrNotHeld says so (passOnLocked).
		code, err := m.release(ctx, h.rOwner, h.rToken, h.token)
		if err == nil && code == 0 {
			err = ErrNotHeld
		}
		return nil, false, wrapErr(KindMutex, m.info.Name, err)
	}
	nh = m.newHold(to, r.token)
	nh.rToken = nh.token + uint64(m.block) - 1
	if !nh.track(sentAt, lease) {
		// Closed meanwhile: nobody will renew or release the new hold.
		_, _ = m.release(ctx, to, nh.rToken, nh.token)
		return nil, false, ErrClosed
	}
	return nh, false, nil
}

// handoffCode is the code mutex_handoff.lua's reply starts with.
type handoffCode int64

const (
	// handoffNotAlone: {0}, the from owner no longer holds the lock alone
	// (lost, or re-entered through another Client); nothing changed.
	handoffNotAlone handoffCode = 0
	// handoffPassed: {1, token}, handed over; token is the new holder's.
	handoffPassed handoffCode = 1
	// handoffYielded: {2}, released to the waiters of other processes
	// instead.
	handoffYielded handoffCode = 2
)

// handoffReply is mutex_handoff.lua's reply, decoded.
type handoffReply struct {
	code  handoffCode
	token uint64 // handoffPassed's
}

// decodeHandoff decodes mutex_handoff.lua's reply. A reply of another
// shape reads as handoffNotAlone: not handed over, so the hold is released
// as any other.
func decodeHandoff(vals []int64) handoffReply {
	if len(vals) == 0 {
		return handoffReply{}
	}
	r := handoffReply{code: handoffCode(vals[0])}
	switch {
	case len(vals) == 1 && r.code == handoffYielded:
	case len(vals) >= 2 && r.code == handoffPassed:
		r.token = uint64(vals[1])
	default:
		r.code = handoffNotAlone
	}
	return r
}
