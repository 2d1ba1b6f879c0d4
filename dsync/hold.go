package dsync

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// A hold is one acquisition of a lock in Redis by this Client for one owner.
// Re-entries by the same owner share the hold and push a lock context each.
// The hold keeps its lease alive (through the renewal loop, unless it has a
// fixed lease) and cancels its lock contexts when it is released or lost.
//
// Its fields have four guards, as the groups below say: set before the
// hold is shared (track, trackUntil) and read-only after; the renewal
// loop's goroutine alone; hold.mu; leaseClock.mu (slot, due). tag is
// atomic. (Lock order: see locking.go.)
type hold struct {
	// Set by newHold, read-only after.
	c    *Client
	id   uint64
	lock *Lock
	// ownerVal is the owner and the fencing token (fresh false), which
	// the hold's lock contexts carry: a pointer to it (lockCtx.Value).
	ownerVal
	start int64 // when it was acquired, in the lease clock's ticks: see held

	// watchdog holds are renewed by the renewal loop; ops is how (set
	// before track, read-only after).
	ops holdOps
	// renewTag caches the value a batched renewal expects, "<owner>
	// <token> 1" (renewValue, which the release sends too: see
	// holdOps.renewKey); only the renewal loop's goroutine touches it,
	// unless it was set before track (a fresh owner's Mutex hold: its
	// bytes follow the owner's, see ownerTag), and then nothing writes it.
	renewTag string

	// rOwner and rToken are the hold as Redis knows it, which scripts
	// check: for a Mutex they differ from owner and token after a handoff
	// inside the Client, which takes a token from the block reserved in
	// Redis instead of a round trip (see Mutex.passOnLocked). Set before
	// track, read-only after.
	rOwner string
	rToken uint64
	// key is the lock's key, which names its tag hash (set before track,
	// read-only after); tag, set when the observer tags holds
	// (Observer.HoldTag), is this hold's (atomic; see tagger).
	key string
	tag atomic.Pointer[holdTag]
	// byLocker: Lock or TryLock took it, and dropped its lock context
	// (set just after the acquisition; for what a forced release reports).
	byLocker atomic.Bool
	// slot and due (below) are the hold's entry in the Client's
	// leaseClock, guarded by leaseClock.mu, not by hold.mu: its index in
	// the heap (-1 when not watched) and the deadline it was pushed with
	// (see tick).
	slot int32

	// mu guards the fields from here to the end, but for due.
	mu       sync.Mutex
	succ     *hold     // the hold this one was handed to inside the Client, same hold in Redis
	deadline time.Time // when the lease clock runs out
	due      int64     // (leaseClock.mu: see slot)
	cause    error     // why it ended (set with ended): its lock contexts' cause
	watchdog bool      // (not guarded by mu: see ops)
	ended    bool
	// releasing: a release is on its way: a renewal that finds the hold
	// gone raced with it; gone: a renewal found the hold gone while
	// releasing: no local handoff (handOff); expiring: the lease clock ran
	// out: a renewal that succeeds now is too late; used1: lctx1 was
	// handed out; kept: the lock stayed in this Client at the hold's end,
	// handed by a script to a waiter of its own (see tagger.ended).
	releasing, gone, expiring, used1, kept bool
	// bound: the last renewal found the hold bound to the Client's
	// renewal session (session.go); the renewal loop's goroutine alone
	// touches it (not mu).
	bound bool
	// The cancels of the hold's lock contexts, one per acquisition:
	// cancel1 the outermost's (nil when none is left), more the
	// re-entries', innermost last (made at the first re-entry; never
	// non-empty while cancel1 is nil). The common hold, never re-entered,
	// keeps one func and a nil pointer: with the fields ordered to leave
	// no padding but a byte after the flags, the hold is 280 bytes, and
	// with a fresh owner's bytes (freshMutexOwner) 416, a size class of
	// Go's allocator (TestHoldSizeClass).
	cancel1 context.CancelCauseFunc
	more    *[]context.CancelCauseFunc

	// The first acquisition's lock context lives in the hold itself, so
	// that the common hold, never re-entered, costs one allocation for
	// both (plus the context package's own); written under mu, once.
	lctx1 lockCtx
}

// pushCancel records the cancel of one more acquisition (h.mu held).
func (h *hold) pushCancel(cancel context.CancelCauseFunc) {
	if h.cancel1 == nil {
		h.cancel1 = cancel
		return
	}
	if h.more == nil {
		h.more = new([]context.CancelCauseFunc)
	}
	*h.more = append(*h.more, cancel)
}

// depthLocked is how many acquisitions the hold has (h.mu held).
func (h *hold) depthLocked() int {
	n := 0
	if h.cancel1 != nil {
		n = 1
	}
	if h.more != nil {
		n += len(*h.more)
	}
	return n
}

// since is when h was acquired.
func (h *hold) since() time.Time { return epoch.Add(time.Duration(h.start)) }

// held is how long ago h was acquired.
func (h *hold) held() time.Duration { return time.Duration(tick(time.Now()) - h.start) }

// holdOps is a hold's one extension point: how its primitive renews and
// releases it, and what it does when the hold ends. Every hold has one.
type holdOps interface {
	// renewKey names, for a hold whose lock value has the mutex's layout
	// "<owner> <token> <count>", the key and the value "<owner> <token> 1"
	// (renewValue) whose prefix "<owner> <token> " (the value less its
	// last byte) proves the hold is still its owner's: the renewal loop
	// then renews it in a batch (MutexRenewMany) with every such hold of
	// the Client, whatever its primitive. ok false: renewIn.
	renewKey(h *hold) (key, value string, ok bool)
	// renewIn names the batch script that renews h with the other holds
	// of its kind (one of the scripts' *RenewMany, whose ARGV[1] is the
	// lease), and the keys and args h adds to a batch of it.
	renewIn(h *hold) (s *rueidis.Lua, keys, args []string)
	// releaseExec is the release Close sends for h.
	releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec)
	// ended is called when h ends, by release, loss (lost) or Close,
	// before its contexts are cancelled, so that the primitive can forget
	// it; never under hold.mu, leaseClock.mu or Client.mu. With lost, under
	// no lock at all: a Mutex's and a qlock's take getMutex and
	// mutexState.mu. A released hold may end under its mutexState.mu (a
	// Mutex's local handoff, passOnLocked). See locking.go.
	ended(h *hold, lost bool)
}

// renewValue returns (and caches) "<owner> <token> 1", h as Redis knows
// it with a count of 1 and no flags, for renewKey: what a Mutex hold's
// value most often is, so that the renewal script, whose MGET then makes
// a Lua string equal to this argument's, compares it without making one
// (Lua interns strings: one is found, not allocated and collected) and
// most often by a pointer comparison (see mutex_renew_many.lua).
func (h *hold) renewValue() string {
	if h.renewTag == "" {
		h.renewTag = h.rOwner + " " + strconv.FormatUint(h.rToken, 10) + " 1"
	}
	return h.renewTag
}

// newHold makes a hold of the lock l points to (the primitive's, shared by
// its holds).
func (c *Client) newHold(l *Lock, owner string, token uint64) *hold {
	h := new(hold)
	c.initHold(h, l, owner, token)
	return h
}

// initHold makes *h, memory no one else uses yet, a new hold (newHold).
func (c *Client) initHold(h *hold, l *Lock, owner string, token uint64) {
	*h = hold{c: c, id: c.holdSeq.Add(1), lock: l, ownerVal: ownerVal{owner: owner, token: token}, rOwner: owner, rToken: token, start: tick(time.Now()), slot: -1}
}

// track starts the hold's lease clock: valid until sentAt+validity(lease),
// moved on by each renewal. The clock watching it registers the hold for
// Close and, with a watchdog, for renewal (leaseClock.each). It reports false if the Client is closed (or h
// ended meanwhile: see trackUntil).
func (h *hold) track(sentAt time.Time, lease time.Duration) bool {
	return h.trackUntil(sentAt.Add(validity(lease)))
}

// trackUntil is track with the lease clock's end given: a hold that takes
// over another's lease in Redis takes over its clock too. It reports false
// if the Client is closed or h has ended (lost while being handed over).
func (h *hold) trackUntil(deadline time.Time) bool {
	c := h.c
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return false
	}
	h.mu.Lock()
	if h.ended {
		// Lost before its clock started (a renewal found the lock gone
		// after it was handed over: renewReply).
		h.mu.Unlock()
		c.mu.Unlock()
		return false
	}
	// A renewal that reached h before its clock started counts (renewReply).
	h.deadline = later(deadline, h.deadline)
	deadline = h.deadline
	h.mu.Unlock()
	ok := c.clock.add(h, deadline)
	c.mu.Unlock()
	return ok
}

// newCtx returns a lock context for one more acquisition of this hold (see
// lockCtx).
func (h *hold) newCtx(parent context.Context) context.Context {
	cctx, cancel := context.WithCancelCause(parent)
	h.mu.Lock()
	var lctx *lockCtx
	if !h.used1 {
		h.used1 = true
		lctx = &h.lctx1
	} else {
		lctx = new(lockCtx)
	}
	*lctx = lockCtx{Context: cctx, parent: parent, h: h}
	if h.ended {
		cause := h.cause
		h.mu.Unlock()
		cancel(cause)
		return lctx
	}
	h.pushCancel(cancel)
	h.mu.Unlock()
	return lctx
}

// A lockCtx is a lock context: the cancellation the hold ends (a
// context.WithCancelCause of the caller's context), the owner and fencing
// token, and the hold, in one value.
//
// Err looks at the hold's lease clock itself: if it has run out before the
// Client's clock ended the hold (its timer fires late on a loaded machine,
// or the process was frozen and has just been thawed, and the goroutine
// that checks runs first), Err ends the hold as lost there and then, so a
// holder that checks its lock context before acting never believes in a
// lease that Redis may have let go. Done is closed by the same end.
//
// A lock context of a fixed-lease hold (no watchdog) has a Deadline at the
// lease end (or the parent's, if sooner), when it is cancelled anyway, so
// that work scoped to the lock can plan for it: its hold's deadline, which
// no renewal moves.
type lockCtx struct {
	context.Context
	// parent is the context the acquisition was made under: a Cond's Wait
	// waits under it after releasing the lock, which cancels the lock
	// context itself.
	parent context.Context
	h      *hold // its ownerVal is the lock context's owner and token
}

func (c *lockCtx) Value(key any) any {
	switch key.(type) {
	case ownerKey:
		return &c.h.ownerVal
	case lockCtxKey:
		return c
	}
	return c.Context.Value(key)
}

// lockCtxKey finds the lock context a context derives from.
type lockCtxKey struct{}

func (c *lockCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.h.overdue() {
		// Ended: by this call, or by another goroutine that is about to
		// cancel the contexts (a few steps, none of them blocking); wait
		// for that rather than report the hold valid meanwhile.
		for i := 0; i < 10000; i++ {
			if err := c.Context.Err(); err != nil {
				return err
			}
			runtime.Gosched()
		}
		return c.Context.Err()
	}
	return nil
}

func (c *lockCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if c.h.watchdog {
		return d, ok
	}
	c.h.mu.Lock()
	end := c.h.deadline
	c.h.mu.Unlock()
	if end.IsZero() || (ok && d.Before(end)) {
		return d, ok
	}
	return end, true
}

func (c *lockCtx) String() string { return "dsync lock context" }

// overdue ends h as lost if its lease clock has run out but the Client's
// clock has not ended it yet, and reports whether h is ended now.
func (h *hold) overdue() bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return true
	}
	if h.deadline.IsZero() || time.Now().Before(h.deadline) {
		h.mu.Unlock()
		return false
	}
	h.expiring = true // a renewal reply that comes now is too late
	deadline := h.deadline
	h.mu.Unlock()
	h.end(h.expiredCause(deadline, time.Now()), true)
	return true
}

// lossCause reports the cause of h's loss if h is lost (its lease clock
// has run out, which ends it here, or it ended with ErrLockLost), nil if
// it is live or ended otherwise (released, or Close). It reads h's own
// cause, not a lock context's, which the caller's context may have ended
// first.
func (h *hold) lossCause() error {
	if !h.overdue() {
		return nil
	}
	h.mu.Lock()
	cause := h.cause
	h.mu.Unlock()
	if !errors.Is(cause, ErrLockLost) {
		return nil
	}
	return cause
}

// pop ends the innermost acquisition; it reports how many remain.
func (h *hold) pop() int {
	h.mu.Lock()
	n := h.depthLocked()
	if n == 0 {
		h.mu.Unlock()
		return 0
	}
	var cancel context.CancelCauseFunc
	if n > 1 {
		more := *h.more
		cancel = more[len(more)-1]
		more[len(more)-1] = nil
		*h.more = more[:len(more)-1]
	} else {
		cancel, h.cancel1 = h.cancel1, nil
	}
	h.mu.Unlock()
	cancel(errReleased)
	return n - 1
}

func (h *hold) depth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.depthLocked()
}

// end stops the hold's lease clock and renewal and cancels its remaining
// contexts with cause. It reports whether this call ended it. With lost,
// it must not run under any mutexState.mu (holdOps.ended).
func (h *hold) end(cause error, lost bool) bool {
	h.mu.Lock()
	return h.endLocked(cause, lost)
}

// endLocked is end with h.mu held; it unlocks it.
func (h *hold) endLocked(cause error, lost bool) bool {
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.ended = true
	h.cause = cause
	cancel1, more := h.cancel1, h.more
	h.cancel1, h.more = nil, nil
	h.mu.Unlock()
	c := h.c
	c.clock.remove(h)
	h.ops.ended(h, lost)
	// Report a loss before cancelling, so whoever waits on a lock context
	// finds it already recorded; log it after, since a log write may be
	// slow and a lock context must not look valid meanwhile (see
	// lockCtx.Err).
	if lost {
		if f := c.cfg.observer.Lost; f != nil {
			f(Lost{Lock: *h.lock, Hold: h.id, Held: h.held(), Cause: cause})
		}
	}
	if more != nil {
		for i := len(*more) - 1; i >= 0; i-- {
			(*more)[i](cause)
		}
	}
	if cancel1 != nil {
		cancel1(cause)
	}
	if lost {
		c.cfg.logger.Warn("dsync: lock lost", "kind", h.lock.Kind, "name", shortName(h.lock.Name), "cause", cause)
	}
	c.untag(h)
	return true
}

// beginRelease marks the hold as being released, so that a renewal in flight
// that finds it already gone leaves the verdict to the release (see
// renewReply).
func (h *hold) beginRelease() {
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
}

// cancelRelease undoes beginRelease for a hold whose release was refused
// (it did not end the hold): a renewal that found it gone meanwhile ends
// it as lost now, as it would have then.
func (h *hold) cancelRelease() {
	h.mu.Lock()
	h.releasing = false
	if h.gone && !h.ended {
		h.gone = false
		h.endLocked(h.lostCause(whyGone), true)
		return
	}
	h.mu.Unlock()
}

// leaving reports whether h is being released or has ended: a renewal
// round leaves it out of its session batches (see renewer.takeOff).
func (h *hold) leaving() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.releasing || h.ended
}

func (h *hold) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// confirmedWithin reports whether h is not ended and its hold in Redis was
// confirmed (acquired, handed over or renewed: the send time its lease
// clock counts from) less than lease/30 ago, lease being the hold's.
func (h *hold) confirmedWithin(lease time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.ended && time.Until(h.deadline) > validity(lease)-lease/30
}

// handOff hands h to nh inside the Client, as the same hold in Redis, and
// returns h's lease clock's end for nh to take over (trackUntil). It is one
// step with renewReply: a reply that comes after it reaches nh, one that
// came before is in the end returned. It refuses (false) a hold that is
// lost: ended, its lease clock run out, or found gone by a renewal while
// being released, since a handoff without a round trip would pass on a
// lock Redis no longer holds.
func (h *hold) handOff(nh *hold) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || h.expiring || h.gone || !time.Now().Before(h.deadline) {
		return time.Time{}, false
	}
	h.succ = nh
	return h.deadline, true
}

// renewReply applies the reply to a renewal of h's hold in Redis, sent at
// sentAt, to the hold that carries it now: h, or the last hold it was
// handed to inside the Client (handOff). Renewed (ok): its lease clock
// moves on, only forward (a reply may arrive after a newer renewal's); one
// whose clock ran out stays lost, and one whose clock has not started yet
// (being handed over) keeps the new end for trackUntil. Gone: the hold is
// lost, unless a release is on its way, which may have removed it itself:
// the release's own script then says whether it was still held, and a
// handoff without a round trip is refused (handOff). A loss's cause says
// why: gone (whyGone, whyForced, whyMissed).
func (h *hold) renewReply(ok bool, sentAt time.Time, lease time.Duration, gone string) {
	h.mu.Lock()
	for h.succ != nil {
		next := h.succ
		h.mu.Unlock()
		h = next
		h.mu.Lock()
	}
	switch {
	case h.ended:
	case ok:
		if !h.expiring {
			h.deadline = later(h.deadline, sentAt.Add(validity(lease)))
		}
	case h.releasing:
		h.gone = true
	default:
		h.endLocked(h.lostCause(gone), true)
		return
	}
	h.mu.Unlock()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
