package dsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// A Semaphore is a weighted semaphore shared by every Client, in any
// process, that uses the same key prefix, name and size: the cross-process
// counterpart of golang.org/x/sync/semaphore.Weighted. An owner's permits
// (see WithOwner) add up across acquisitions; each Acquire(n) needs a
// Release(n). A dead owner's permits come back within one lease; a dead
// waiter's place lapses within one lease of its last look, and permits
// granted to it before then come back a lease after the grant (up to two
// leases after its death). Waiters are served in arrival order: a large
// request is not overtaken by later small ones. Using a name with another
// size fails with ErrInvalidArgument until the semaphore has been idle for
// an hour.
//
// A Semaphore is safe for concurrent use. Its zero value is not usable;
// create Semaphores with Client.NewSemaphore. A Semaphore may be copied only
// before first use.
type Semaphore struct {
	c     *Client
	name  string
	size  int64
	keys  []string // scripts.SemKeys
	chPfx string   // a Client's waiters are told of grants on chPfx + client id
	err   error    // a bad name or size, returned by every call
	lc    lockConfig
}

// NewSemaphore returns the semaphore called name with size permits. An
// invalid name or a size <= 0 makes every call fail with ErrInvalidArgument.
func (c *Client) NewSemaphore(name string, size int64, opts ...LockOption) *Semaphore {
	base := c.lockKey("sem", name)
	err := checkName(name)
	if err == nil && size <= 0 {
		err = fmt.Errorf("%w: semaphore %q: size %d: give NewSemaphore a size of at least 1", ErrInvalidArgument, shortName(name), size)
	}
	return &Semaphore{
		c: c, name: name, size: size, err: err, lc: newLockConfig(opts),
		keys:  scripts.SemKeys(base),
		chPfx: base + ":w:",
	}
}

// Acquire acquires n permits for the owner ctx carries, as Mutex.LockContext
// does; the lock context has a fencing token of its own. n <= 0 or n above
// the size fails with ErrInvalidArgument. On failure it leaves the semaphore
// unchanged.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (context.Context, error) {
	lctx, _, err := s.acquire(ctx, n, false)
	return lctx, err
}

// TryAcquire is Acquire without waiting: when the permits are not available
// at once, or other waiters are ahead, it returns false and a nil error, and
// leaves the semaphore unchanged.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (context.Context, bool, error) {
	return s.acquire(ctx, n, true)
}

// Locker returns a sync.Locker whose Lock acquires n permits of s, as
// Mutex.Lock does, and whose Unlock releases them, panicking if the Locker
// holds none. It also has a TryLock method. An n outside 1..size makes Lock
// panic with ErrInvalidArgument.
func (s *Semaphore) Locker(n int64) sync.Locker {
	l := &semLocker{s: s, n: n}
	if s.err == nil && (n <= 0 || n > s.size) { // (else Lock reports s.err)
		l.err = fmt.Errorf("%w: Locker(%d) of semaphore %q: n must be between 1 and the size, %d",
			ErrInvalidArgument, n, shortName(s.name), s.size)
	}
	return l
}

// semLocker is Semaphore.Locker's sync.Locker, through the adapter in
// locker.go.
type semLocker struct {
	s   *Semaphore
	n   int64
	err error       // an n outside 1..size
	lk  lockerHolds // the owners of the permits taken by Lock or TryLock
}

func (l *semLocker) Lock()         { lockerLock(l, &l.lk) }
func (l *semLocker) TryLock() bool { return lockerTryLock(l, &l.lk) }
func (l *semLocker) Unlock()       { lockerUnlock(l, &l.lk, "unlock") }

func (l *semLocker) lockFor(ctx context.Context, try bool) (context.Context, bool, error) {
	if l.err != nil {
		return nil, false, l.err
	}
	return l.s.acquire(ctx, l.n, try)
}

func (l *semLocker) unlockFor(owner string) error { return l.s.Release(ownerOnly(owner), l.n) }

func (l *semLocker) lockerEnv() (string, string, *slog.Logger, *Client) {
	return "Semaphore", l.s.name, l.s.c.cfg.logger, l.s.c
}

// Release releases n permits of the owner ctx carries, even if ctx is
// cancelled, and cancels the lock context of their acquisition. If the owner
// holds fewer than n permits it returns ErrNotHeld (ErrWrongContext if ctx
// carries no owner) and changes nothing. If Redis cannot be reached, the
// permits stay held until their lease lapses.
func (s *Semaphore) Release(ctx context.Context, n int64) error {
	if ctx == nil {
		return &lockError{kind: KindSemaphore, name: s.name, err: fmt.Errorf("%w: nil context: pass the lock context Acquire returned", ErrInvalidArgument)}
	}
	if err := s.check(n); err != nil {
		return err
	}
	if err := s.c.enter(); err != nil {
		return err
	}
	defer s.c.exit()
	owner, ok := OwnerOf(ctx)
	if !ok {
		return notHeld(ctx, KindSemaphore, s.name, "Acquire", false)
	}
	if err := s.c.otherClient(ctx, KindSemaphore, s.name, "Release"); err != nil {
		return err
	}
	cctx, cancel := cleanupCtx(releaseCtx(ctx))
	defer cancel()
	tok, _ := FencingToken(ctx)
	rh := s.holdFor(owner, tok, n)
	if rh != nil {
		// A renewal round or a check of the holds (a notice, the control
		// subscription coming up) that reads Redis after this release ran
		// finds the acquisition gone: it is released, not lost.
		rh.beginRelease()
	}
	if s.c.tags != nil {
		s.c.beforeRelease(rh)
	}
	vals, err := s.c.run(cctx, s.releaseCall(owner, n, tok, false)).AsIntSlice()
	exact := false
	if err != nil && !isRedisErr(err) && s.holdsExactly(owner, tok, n) {
		// The reply was lost: the connection broke, or the release's
		// context ended with the release on its way (a process frozen
		// in the call past its deadline). Sent again exactly: the
		// acquisition of this lock context or nothing, since the first
		// may have released it, and a second decrement must not release
		// another acquisition in its place. (Without such an acquisition
		// it is not sent again: the local holds end either way, and at
		// worst the permits come back when the owner's lease lapses.)
		exact = true
		vals, err = s.releaseAgain(ctx, s.releaseCall(owner, n, tok, true))
	}
	r, ok := decodeSemRel(vals)
	if err == nil && !ok {
		err = errors.New("dsync: unexpected reply from the release script")
	}
	if err == nil && exact && r.code == semRelGone {
		// The first try's work, or the acquisition's lease lapsed: either
		// way the release is done (releaseAgain).
		r.code = semRelReleased
	}
	if f := s.c.cfg.test.semReleaseReplied; f != nil {
		f()
	}
	if err == nil && (r.code == semRelSizeMismatch || r.code == semRelNotHeld) && rh != nil {
		// Refused: rh goes on (or is lost, if a check found it gone).
		rh.cancelRelease()
	}
	if err == nil && r.code == semRelSizeMismatch {
		return s.sizeMismatch(r.n)
	}
	if err == nil && r.code == semRelNotHeld {
		if r.n > 0 {
			return &lockError{kind: KindSemaphore, name: s.name, err: fmt.Errorf("%w: the owner holds %d permits, fewer than the %d to release; nothing was released: release as many as its acquisitions took (Release(lctx, n) with the n of that Acquire)", ErrNotHeld, r.n, n)}
		}
		return notHeld(ctx, KindSemaphore, s.name, "Acquire", true)
	}
	ended, local := s.take(owner, tok, n, err == nil && r.n == 0)
	if err == nil && !local {
		// The owner's permits held through another Client (see
		// Mutex.unlock).
		s.c.tellReleasedByOwner(ctx, s.name)
	}
	for _, h := range ended {
		if h.end(errReleased, false) {
			if f := s.c.cfg.observer.Released; f != nil {
				f(ctx, Released{Lock: *h.lock, Hold: h.id, Held: h.held(), Err: err, Complete: true})
			}
		}
	}
	return releaseErr(ctx, wrapErr(KindSemaphore, s.name, err))
}

// holdFor returns the hold a release of n permits by owner with token tok
// releases first (see take), or nil.
func (s *Semaphore) holdFor(owner string, tok uint64, n int64) *hold {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	hs := s.c.semHolds[s.keys[0]][owner]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].lock.N == n && (tok == 0 || hs[i].token == tok) {
			return hs[i]
		}
	}
	return nil
}

// holdsExactly reports whether this Client holds, for owner, the
// acquisition with token tok and exactly n permits: the one a release of
// n permits with tok releases, alone.
func (s *Semaphore) holdsExactly(owner string, tok uint64, n int64) bool {
	if tok == 0 {
		return false
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for _, h := range s.c.semHolds[s.keys[0]][owner] {
		if h.token == tok && h.lock.N == n {
			return true
		}
	}
	return false
}

// releaseAgain sends a release whose first reply was lost again, exactly
// (x: releaseCall's with exact), under a budget counted from now (cleanupCtx:
// a process frozen in the first try has its deadline behind it), until
// Redis answers. A reply that the acquisition is gone ({2, left}) is the
// first try's work, or its lease lapsed: either way the release is done
// (Release reads it so).
func (s *Semaphore) releaseAgain(ctx context.Context, x scripts.Call) ([]int64, error) {
	cctx, cancel := cleanupCtx(releaseCtx(ctx))
	defer cancel()
	var vals []int64
	err := idempotent(cctx, func(ctx context.Context) (err error) {
		vals, err = s.c.run(ctx, x).AsIntSlice()
		return err
	})
	return vals, err
}

// semRelCode is the code sem_release.lua's reply, {code, n}, starts with.
type semRelCode int64

const (
	// semRelSizeMismatch: {-1, size}, the Semaphore is stored with another
	// size; nothing changed.
	semRelSizeMismatch semRelCode = -1
	// semRelNotHeld: {0, held}, the owner holds fewer permits than the
	// release's (held); nothing changed.
	semRelNotHeld semRelCode = 0
	// semRelReleased: {1, left}, released; left permits are still the
	// owner's.
	semRelReleased semRelCode = 1
	// semRelGone: {2, held}, an exact release (sent again) found its
	// acquisition gone; nothing changed.
	semRelGone semRelCode = 2
)

// semRelReply is sem_release.lua's reply, decoded: n is the size, the
// permits held or the permits left, by the code.
type semRelReply struct {
	code semRelCode
	n    int64
}

// decodeSemRel decodes sem_release.lua's reply; ok is false unless it has
// two values.
func decodeSemRel(vals []int64) (r semRelReply, ok bool) {
	if len(vals) != 2 {
		return r, false
	}
	return semRelReply{code: semRelCode(vals[0]), n: vals[1]}, true
}

func (s *Semaphore) check(n int64) error {
	if s.err != nil {
		return s.err
	}
	if err := s.c.checkOpen(); err != nil {
		return err
	}
	if n <= 0 || n > s.size {
		return fmt.Errorf("%w: %d permits of semaphore %q (size %d): n must be between 1 and the size", ErrInvalidArgument, n, shortName(s.name), s.size)
	}
	return nil
}

// take removes from s the holds a release of n permits by owner covers: the
// acquisition with token tok if it took n, else the latest one that took n,
// else the latest ones as long as they fit in n. all: the owner holds
// nothing left, so every hold of it ends. had: the owner held permits
// through this Client.
func (s *Semaphore) take(owner string, tok uint64, n int64, all bool) (out []*hold, had bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	hs := s.c.semHolds[s.keys[0]][owner]
	had = len(hs) > 0
	pick := -1
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].lock.N == n && (pick < 0 || hs[i].token == tok) {
			pick = i
		}
	}
	switch {
	case all:
		out, hs = hs, nil
	case pick >= 0:
		out = []*hold{hs[pick]}
		hs = append(hs[:pick:pick], hs[pick+1:]...)
	default:
		for len(hs) > 0 && hs[len(hs)-1].lock.N <= n {
			n -= hs[len(hs)-1].lock.N
			out = append(out, hs[len(hs)-1])
			hs = hs[:len(hs)-1]
		}
	}
	s.setHoldsLocked(owner, hs)
	return out, had
}

// setHoldsLocked stores the holds of owner in the Client's registry
// (Client.semHolds): shared by all Semaphore values of the Client, so one
// may release what another of the same name acquired; entries go when
// their last hold ends, so nothing outlives the holds. c.mu must be held.
func (s *Semaphore) setHoldsLocked(owner string, hs []*hold) {
	c, k := s.c, s.keys[0]
	byOwner := c.semHolds[k]
	if len(hs) > 0 {
		if byOwner == nil {
			if c.semHolds == nil {
				c.semHolds = make(map[string]map[string][]*hold)
			}
			byOwner = make(map[string][]*hold)
			c.semHolds[k] = byOwner
		}
		byOwner[owner] = hs
		return
	}
	delete(byOwner, owner)
	if len(byOwner) == 0 {
		delete(c.semHolds, k)
	}
}

func (s *Semaphore) forget(h *hold) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	hs := s.c.semHolds[s.keys[0]][h.owner]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	s.setHoldsLocked(h.owner, hs)
}

func (s *Semaphore) lease() time.Duration {
	return s.lc.lease(s.c)
}

func (s *Semaphore) acquire(ctx context.Context, n int64, try bool) (context.Context, bool, error) {
	c := s.c
	if err := c.checkCall(ctx, s.err); err != nil {
		return nil, false, wrapErr(KindSemaphore, s.name, err)
	}
	if err := s.check(n); err != nil {
		return nil, false, err
	}
	if err := c.enter(); err != nil {
		return nil, false, err
	}
	defer c.exit()
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	info := Lock{Kind: KindSemaphore, Name: s.name, N: n}
	ctx, ob := c.observe(ctx, info, owner, try)
	h, attempts, err := s.acquireRedis(ctx, owner, n, try)
	var lctx context.Context
	if h != nil {
		lctx = h.newCtx(ctx)
	}
	ob.done(h, false, attempts, err)
	return lctx, h != nil, wrapErr(KindSemaphore, s.name, err)
}
