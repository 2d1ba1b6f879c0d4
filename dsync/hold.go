package dsync

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// A hold is one acquisition of a lock in Redis by this Client for one owner.
// Re-entries by the same owner share the hold and push a lock context each.
// The hold keeps its lease alive (through the renewal loop, unless it has a
// fixed lease) and cancels its lock contexts when it is released or lost.
type hold struct {
	c     *Client
	id    uint64
	lock  Lock
	owner string
	token uint64
	start time.Time

	// renewal, set before track and read-only after: the script and its
	// arguments that extend the lease, and the release used by Close.
	watchdog bool
	renew    func() (*rueidis.Lua, rueidis.LuaExec)
	release  func() (*rueidis.Lua, rueidis.LuaExec)
	// onLost is called (without locks held) when the hold is lost, before
	// its contexts are cancelled, so the primitive can forget it.
	onLost func(*hold)
	// onEnd, when set, is called (without locks held) when the hold ends,
	// by release, loss or Close, before its contexts are cancelled.
	onEnd func(*hold)
	// ops, when set, replaces renew, release and onLost: it builds the
	// commands from the hold itself, so a hold costs no closures.
	ops holdOps
	// renewTag caches what the renewal loop sends for a mutex hold; only
	// that loop's goroutine touches it.
	renewTag string

	// rOwner and rToken are the hold as Redis knows it, which scripts
	// check: for a Mutex they differ from owner and token after a handoff
	// inside the Client, which takes a token from the block reserved in
	// Redis instead of a round trip (see Mutex.passOn).
	rOwner string
	rToken uint64
	// key is the lock's key, which names its tag hash; tag, set when the
	// observer tags holds (Observer.HoldTag), is this hold's.
	key string
	tag atomic.Pointer[string]

	mu        sync.Mutex
	succ      *hold     // the hold this one was handed to inside the Client, same hold in Redis
	deadline  time.Time // when the lease clock runs out
	ended     bool
	releasing bool // a release is on its way: a renewal that finds the hold gone raced with it
	expiring  bool // the lease clock ran out: a renewal that succeeds now is too late
	// slot and due are the hold's entry in the Client's leaseClock,
	// guarded by its mutex: its index in the heap (-1 when not watched)
	// and the deadline it was pushed with (see tick).
	slot    int32
	due     int64
	cancels []context.CancelCauseFunc // one per acquisition, innermost last
}

// holdOps describes the holds of one primitive; see hold.ops.
type holdOps interface {
	renewExec(h *hold) (*rueidis.Lua, rueidis.LuaExec)
	releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec)
	lost(h *hold)
}

func (h *hold) renewCmd() (*rueidis.Lua, rueidis.LuaExec) {
	if h.ops != nil {
		return h.ops.renewExec(h)
	}
	return h.renew()
}

// releaseCmd returns the release script for Close; ok is false if the hold
// has none.
func (h *hold) releaseCmd() (s *rueidis.Lua, e rueidis.LuaExec, ok bool) {
	switch {
	case h.ops != nil:
		s, e = h.ops.releaseExec(h)
		return s, e, true
	case h.release != nil:
		s, e = h.release()
		return s, e, true
	}
	return nil, e, false
}

func (c *Client) newHold(l Lock, owner string, token uint64) *hold {
	return &hold{c: c, id: c.holdSeq.Add(1), lock: l, owner: owner, token: token, rOwner: owner, rToken: token, start: time.Now(), slot: -1}
}

// track starts the hold's lease clock: valid until sentAt+validity(lease),
// moved on by each renewal. It registers the hold for Close and, with a
// watchdog, for renewal. It reports false if the Client is closed.
func (h *hold) track(sentAt time.Time, lease time.Duration) bool {
	return h.trackUntil(sentAt.Add(validity(lease)))
}

// trackUntil is track with the lease clock's end given: a hold that takes
// over another's lease in Redis takes over its clock too.
func (h *hold) trackUntil(deadline time.Time) bool {
	c := h.c
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return false
	}
	h.mu.Lock()
	// A renewal that reached h before its clock started counts (renewed).
	h.deadline = later(deadline, h.deadline)
	deadline = h.deadline
	h.mu.Unlock()
	if !c.clock.add(h, deadline) {
		c.mu.Unlock()
		return false
	}
	c.holds[h] = struct{}{}
	c.holds = compact(c.holds, &c.holdsPeak)
	c.mu.Unlock()
	if h.watchdog {
		c.renew.add(h)
	}
	return true
}

// newCtx returns a lock context for one more acquisition of this hold. A
// hold with a fixed lease (no watchdog) gives its contexts a Deadline at
// the lease clock's end, when they are cancelled anyway, so that work
// scoped to the lock can plan for it.
func (h *hold) newCtx(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(withOwnerVal(parent, ownerVal{id: h.owner, token: h.token}))
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		cancel(ErrLockLost)
		return ctx
	}
	h.cancels = append(h.cancels, cancel)
	end := h.deadline
	h.mu.Unlock()
	if !h.watchdog && !end.IsZero() {
		return &leaseCtx{Context: ctx, end: end}
	}
	return ctx
}

// A leaseCtx is a lock context of a fixed-lease hold: its Deadline is the
// lease end (or the parent's, if sooner). The hold's lease clock cancels it
// then, with ErrLockLost, so it needs no timer of its own.
type leaseCtx struct {
	context.Context
	end time.Time
}

func (c *leaseCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.end) {
		return d, true
	}
	return c.end, true
}

// pop ends the innermost acquisition; it reports how many remain.
func (h *hold) pop() int {
	h.mu.Lock()
	n := len(h.cancels)
	if n == 0 {
		h.mu.Unlock()
		return 0
	}
	cancel := h.cancels[n-1]
	h.cancels = h.cancels[:n-1]
	h.mu.Unlock()
	cancel(errReleased)
	return n - 1
}

func (h *hold) depth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cancels)
}

// end stops the hold's lease clock and renewal and cancels its remaining
// contexts with cause. It reports whether this call ended it.
func (h *hold) end(cause error, lost bool) bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.ended = true
	cancels := h.cancels
	h.cancels = nil
	h.mu.Unlock()
	c := h.c
	c.clock.remove(h)
	c.mu.Lock()
	delete(c.holds, h)
	c.holds = compact(c.holds, &c.holdsPeak)
	c.mu.Unlock()
	if h.watchdog {
		c.renew.remove(h)
	}
	if lost {
		switch {
		case h.ops != nil:
			h.ops.lost(h)
		case h.onLost != nil:
			h.onLost(h)
		}
	}
	if h.onEnd != nil {
		h.onEnd(h)
	}
	if lost {
		// Report before cancelling, so whoever waits on a lock context
		// finds the loss already recorded.
		if f := c.cfg.observer.Lost; f != nil {
			f(Lost{Lock: h.lock, Hold: h.id, Held: time.Since(h.start), Cause: cause})
		}
		c.cfg.logger.Warn("dsync: lock lost", "kind", h.lock.Kind, "name", shortName(h.lock.Name))
	}
	c.untag(h)
	for i := len(cancels) - 1; i >= 0; i-- {
		cancels[i](cause)
	}
	return true
}

// beginRelease marks the hold as being released, so that a renewal in flight
// that finds it already gone does not report it lost.
func (h *hold) beginRelease() {
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
}

func (h *hold) isReleasing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.releasing
}

func (h *hold) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// handedTo records that h was handed to nh inside the Client, as the same
// hold in Redis, so that a renewal of h whose reply arrives after the
// handoff reaches nh (see live).
func (h *hold) handedTo(nh *hold) {
	h.mu.Lock()
	h.succ = nh
	h.mu.Unlock()
}

// live returns the hold that carries h's hold in Redis now: h, or the
// last hold it was handed to inside the Client.
func (h *hold) live() *hold {
	for {
		h.mu.Lock()
		next := h.succ
		h.mu.Unlock()
		if next == nil {
			return h
		}
		h = next
	}
}

// renewed moves the lease clock after a renewal sent at sentAt succeeded
// (the Client's leaseClock finds the new end when the old one comes). A
// hold whose clock has not started yet (being handed over) keeps the new
// end for trackUntil; one whose clock ran out stays lost. Only forward: a
// reply may arrive after a newer renewal's.
func (h *hold) renewed(sentAt time.Time, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || h.expiring {
		return
	}
	h.deadline = later(h.deadline, sentAt.Add(validity(lease)))
}

// leaseEnd returns when the hold's lease clock runs out.
func (h *hold) leaseEnd() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
