package dsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// acquireRedis runs the acquire script in the wait loop (waitLoop) until
// the permits are held, ctx is done or Redis fails. A queued waiter is
// granted its permits by the script that frees them, and told so on its
// Client's channel (sem_common.lua); the fallback is the earliest holder's
// lease end or lease/3, in case the message was lost; each attempt also
// renews the waiter's queue place.
func (s *Semaphore) acquireRedis(ctx context.Context, owner string, n int64, try bool) (*hold, int, error) {
	c := s.c
	lease := s.lease()
	id := strconv.FormatUint(c.attemptSeq.Add(1), 36)
	a := semAttempt{s: s, ctx: ctx, n: n, waiter: c.id[:16] + "." + id}
	a.first, a.again = scripts.SemAcquireCalls(s.keys, owner, a.waiter, n, s.size, leaseMS(lease), try, s.chPfx, leaseMS(c.cfg.lease))
	attempts, err := waitLoop(c, ctx, s.chPfx+c.id[:16], id, try, semWait{&a})
	if err != nil || a.r.code != acqAcquired {
		return nil, attempts, err
	}
	if err := leaseSpent(a.sentAt, lease); err != nil {
		s.undo(ctx, a.waiter)
		return nil, attempts, err
	}
	h := s.newHold(owner, a.waiter, n, a.r.token())
	if a.grant {
		h.start = tick(a.sentAt) // held since the grant, not since it was seen
	}
	if !h.track(a.sentAt, lease) {
		s.undo(ctx, a.waiter)
		h.end(ErrClosed, false)
		return nil, attempts, ErrClosed
	}
	return h, attempts, nil
}

// semAttempt is the state of one Semaphore acquisition in Redis.
type semAttempt struct {
	s      *Semaphore
	ctx    context.Context
	n      int64
	waiter string    // names this acquisition in the queue and in its grant
	r      acqReply  // the last attempt's reply (a grant: {1, token})
	sentAt time.Time // when the last attempt was sent (a grant: when its lease clock starts)
	srvAt  uint64    // the server time of a waiting reply, in µs (0: unknown)
	grant  bool      // the permits came by a grant (sentAt is then its time)

	// first is the call's first attempt, again each later one
	// (scripts.SemAcquireCalls).
	first, again scripts.Call
}

// semWait is a Semaphore acquisition's waitProto. Its undo (by waiter)
// takes back a queue place and the permits of a grant whose reply was
// lost, under a context that outlives ctx.
type semWait struct{ a *semAttempt }

func (w semWait) attempt(ctx context.Context, n int) (bool, time.Duration, error) {
	a, s := w.a, w.a.s
	x := a.first
	if n > 1 {
		x = a.again // only a first attempt skips the look for a grant
	}
	a.sentAt = time.Now()
	vals, err := bounded(s.c, ctx, func(ctx context.Context) ([]int64, error) {
		return s.c.execAcquire(ctx, &s.lc, x.Script, x.Keys, x.Args)
	})
	var ok bool
	a.r, ok = decodeAcq(vals)
	if err == nil && !ok {
		err = errors.New("dsync: unexpected reply from the acquire script")
	}
	if err != nil {
		return true, 0, err
	}
	switch a.r.code {
	case acqSizeMismatch:
		return true, 0, s.sizeMismatch(a.r.value)
	case acqAcquired:
		return true, 0, nil
	}
	a.srvAt = a.r.srvAt()
	return false, max(a.r.hint(), time.Millisecond), nil
}

// failed undoes the acquisition whatever the error (a lost reply may hide
// a grant), unless the script refused it for its size: before the call
// returns for a grant replicas did not acknowledge (as ErrNotReplicated
// says), else in the background, so the call returns by its deadline.
func (w semWait) failed(err error) {
	a := w.a
	switch {
	case a.r.code == acqSizeMismatch:
	case errors.Is(err, ErrNotReplicated):
		a.s.undo(a.ctx, a.waiter)
	default:
		a.s.undoLater(a.ctx, a.waiter)
	}
}

func (w semWait) waiting() {
	a := w.a
	a.s.c.blocked(a.ctx, Lock{Kind: KindSemaphore, Name: a.s.name, N: a.n}, a.s.keys[0])
}

func (w semWait) gaveUp() { w.a.s.undoLater(w.a.ctx, w.a.waiter) }

// newHold makes the hold of one acquisition, "<owner> <token> <waiter>
// <permits>" in Redis, with a lease of its own that only its renewal
// extends.
func (s *Semaphore) newHold(owner, waiter string, n int64, token uint64) *hold {
	c := s.c
	sh := &semHold{s: s, member: scripts.SemMember(owner, token, waiter, n), lock: Lock{Kind: KindSemaphore, Name: s.name, N: n}}
	h := c.newHold(&sh.lock, owner, token)
	h.key = s.keys[0]
	h.watchdog = s.lc.leaseTime == 0
	h.ops = sh
	c.mu.Lock()
	s.setHoldsLocked(owner, append(c.semHolds[s.keys[0]][owner], h))
	c.mu.Unlock()
	return h
}

// semHold is the holdOps of one Semaphore acquisition: its member
// "<owner> <token> <waiter> <permits>" and its permits. (A release of part
// of its permits renames it in Redis; the renewal finds it by the rest.)
type semHold struct {
	s      *Semaphore
	member string
	lock   Lock // N: its permits
}

func (sh *semHold) renewKey(*hold) (string, string, bool) { return "", "", false }

func (sh *semHold) renewIn(*hold) (*rueidis.Lua, []string, []string) {
	s := sh.s
	return scripts.SemRenewMany, s.keys, scripts.AppendSemRenewManyArgs(nil, sh.member, s.chPfx)
}

func (sh *semHold) releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec) {
	x := sh.s.releaseCall(h.owner, sh.lock.N, h.token, false)
	return x.Script, x.LuaExec
}

// ended forgets the hold however it ends (release, loss, Client.Close).
func (sh *semHold) ended(h *hold, _ bool) { sh.s.forget(h) }

// undo takes back the Acquire call of waiter (sem_undo.lua), under a
// context that outlives ctx: a wait ended by its context, or a grant whose
// reply was lost or not synced, leaves nothing behind.
func (s *Semaphore) undo(ctx context.Context, waiter string) {
	_ = idempotent(ctx, s.undoCall(waiter))
}

// undoCall is sem_undo.lua's call for waiter, for undo and undoLater.
func (s *Semaphore) undoCall(waiter string) func(context.Context) error {
	x := scripts.SemUndoCall(s.keys, waiter, s.chPfx, leaseMS(s.c.cfg.lease))
	return func(ctx context.Context) error {
		return s.c.run(ctx, x).Error()
	}
}

// undoLater runs undo at once within a budget, then, if that did not
// finish, in the background: exact (by waiter), so it can. ctx is the
// wait's (see cleanupNow).
func (s *Semaphore) undoLater(ctx context.Context, waiter string) {
	s.c.cleanupNow(ctx, s.undoCall(waiter), nil)
}

// sizeMismatch is the error of a call through s when Redis stores another
// size for the semaphore.
func (s *Semaphore) sizeMismatch(stored int64) error {
	return fmt.Errorf("%w: semaphore %q has size %d in Redis, opened with size %d: open it with size %d (a new size takes once the semaphore has had no holder and no waiter for an hour)",
		ErrInvalidArgument, shortName(s.name), stored, s.size, stored)
}

// releaseCall is the release of n permits of owner acquired with token tok
// (exact: sent again after its reply was lost). The size is checked as the
// acquire checks it: a Semaphore opened with another size must not release
// permits counted against the stored one.
func (s *Semaphore) releaseCall(owner string, n int64, tok uint64, exact bool) scripts.Call {
	return scripts.SemReleaseCall(s.keys, owner, n, s.chPfx, s.size, tok, exact)
}

// granted ends the wait with the permits a release granted it, as the
// reply of an attempt that found the grant; the lease clock starts at the
// grant (grantStart). A grant with less than half its lease left by now is
// claimed again by the next attempt instead (grantLive).
func (w semWait) granted(tok, at uint64) bool {
	a := w.a
	start, live := grantClock(a.sentAt, a.srvAt, at, a.s.lease())
	if !live {
		return false
	}
	a.r = acqReply{code: acqAcquired, value: int64(tok)}
	a.sentAt, a.grant = start, true
	return true
}
