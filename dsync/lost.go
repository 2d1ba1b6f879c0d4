package dsync

import (
	"fmt"
	"time"
)

// A lostError is the cause (context.Cause) of the lock contexts of a hold
// that was lost: it names the lock and says why. It is an ErrLockLost.
type lostError struct {
	kind Kind
	name string
	why  string
}

func (e *lostError) Error() string {
	return fmt.Sprintf("dsync: %s %q: lock lost: %s", e.kind, shortName(e.name), e.why)
}

func (e *lostError) Unwrap() error { return ErrLockLost }

// lostCause is the cause of h's loss for the reason why.
func (h *hold) lostCause(why string) error {
	return &lostError{kind: h.lock.Kind, name: h.lock.Name, why: why}
}

// Why a hold was lost, as lostCause says it.
const (
	// whyGone: a renewal (or a check after a forced release that named
	// another lock of the name) found the hold gone from Redis.
	whyGone = "a renewal found it gone from Redis or held by another owner (its key expired there, was deleted or force-unlocked, or Redis lost its data)"
	// whyForced: the check a forced release asked for found it gone.
	whyForced = "force-unlocked (ForceUnlock, dsync unlock --force, or a release by its owner through another Client), found gone in Redis right after"
	// whyMissed: the check made when the control channel's subscription
	// was confirmed (a notice may have been missed before) found it gone:
	// a forced release is one cause among the others.
	whyMissed = "found gone from Redis or held by another owner when this Client's control subscription came up (its key expired there, was deleted or force-unlocked, or Redis lost its data)"
	// whyHandoff: the handoff or release script found it gone.
	whyHandoff = "its release found it gone from Redis or held by another owner (its key expired there, was deleted or force-unlocked, or Redis lost its data)"
)

// pauseLate is how late past its deadline a lease clock must end a hold
// for the loss to be put down to a pause of the process (or a starved
// one): the clock's timer is otherwise late by milliseconds.
const pauseLate = 250 * time.Millisecond

// expiredCause is the cause of h's loss when its lease clock, due at
// deadline, ran out and was seen to at now: the process was paused (the
// clock acted late), the renewals failed (since when, and why: refused by
// Redis, or no answer), a fixed lease ended, or no renewal reached Redis
// in time.
func (h *hold) expiredCause(deadline, now time.Time) error {
	if late := now.Sub(deadline); !deadline.IsZero() && late >= pauseLate {
		return h.lostCause(fmt.Sprintf("its lease ran out locally while the process was paused or starved: this Client acted %v after the lease clock's end, and no renewal could run meanwhile", late.Round(time.Millisecond)))
	}
	if !h.watchdog {
		return h.lostCause("its fixed lease (WithLeaseTime) ran out")
	}
	if f := h.c.renew.lastFail.Load(); f != nil {
		if refused(f.err) {
			return h.lostCause(fmt.Sprintf("its lease ran out: Redis refused the renewals since %s (%v): grant the Client's user the commands dsync needs", f.since.Format(time.RFC3339), f.err))
		}
		return h.lostCause(fmt.Sprintf("its lease ran out: the renewals failed since %s (%v)", f.since.Format(time.RFC3339), f.err))
	}
	return h.lostCause("its lease ran out before a renewal reached Redis")
}

// renewFail is the renewer's record of failing rounds: the first one's
// time and the last one's error.
type renewFail struct {
	since time.Time
	err   error
}
