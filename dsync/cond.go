package dsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// A Cond is a condition variable tied to a Mutex, for goroutines in any
// processes that wait for a change the holders of the Mutex make: the
// cross-process counterpart of sync.Cond. No signal is lost: a Signal or
// Broadcast after a Wait released the lock reaches that waiter, and a signal
// whose waiter gave up passes on. A waiter may rarely wake without a signal,
// so, as with sync.Cond, check the condition again.
//
// A Cond is safe for concurrent use. Its zero value is not usable; create
// Conds with Client.NewCond. A Cond may be copied.
type Cond struct {
	m    *Mutex
	keys []string // scripts.CondKeys: waiters, places, signalled
	ch   string   // this Client's wakeup channel
	info Lock
	err  error // made by another Client than its Mutex's: every call fails
}

// NewCond returns the condition variable of l, shared by every Client that
// makes one for a Mutex of the same name. c must be l's Client: otherwise
// every call of the Cond fails with ErrInvalidArgument.
func (c *Client) NewCond(l *Mutex) *Cond {
	if l == nil {
		return &Cond{}
	}
	base := c.lockKey("cond", l.info.Name)
	cd := &Cond{m: l, keys: scripts.CondKeys(base), ch: base + ":ch:" + c.id[:16],
		info: Lock{Kind: KindCond, Name: l.info.Name, N: 1}}
	if l.c != c {
		cd.err = &lockError{kind: KindCond, name: l.info.Name, err: fmt.Errorf("%w: NewCond was called on Client %s with a Mutex of Client %s: make the Cond with the Mutex's own Client", ErrInvalidArgument, c.ident, l.c.ident)}
	}
	return cd
}

// Wait atomically releases the lock lctx holds and waits for a Signal or
// Broadcast, then re-acquires the lock for the same owner and returns the
// new lock context. On error the lock is not held. lctx must be the Mutex's
// lock context, held through the Mutex's Client and not re-entered:
// otherwise Wait returns ErrWrongContext, ErrNotHeld or ErrInvalidArgument
// and leaves the lock as it was. The wait ends with the context the lock was
// acquired with, at lctx's deadline, or at a Redis error.
func (cd *Cond) Wait(lctx context.Context) (context.Context, error) {
	if cd.m == nil {
		return nil, fmt.Errorf("%w: Cond of a nil Mutex", ErrInvalidArgument)
	}
	if cd.err != nil {
		return nil, cd.err
	}
	m := cd.m
	c := m.c
	if err := c.checkCall(context.Background(), m.err); err != nil {
		return nil, err
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	if lctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := c.otherClient(lctx, KindCond, cd.info.Name, "Wait"); err != nil {
		return nil, err
	}
	lc, _ := lctx.Value(lockCtxKey{}).(*lockCtx)
	if lc == nil || lc.h.key != m.key || lc.h.c != c {
		return nil, &lockError{kind: KindCond, name: cd.info.Name, err: fmt.Errorf("%w: pass the lock context that LockContext of the Cond's Mutex returned, through the Cond's Client (with a Mutex taken by Lock, call WaitLocked)", ErrWrongContext)}
	}
	if lc.h.isEnded() {
		return nil, wrapErr(KindCond, cd.info.Name, ErrNotHeld)
	}
	if err := lctx.Err(); err != nil {
		return nil, wrapErr(KindCond, cd.info.Name, err) // the lock is still held
	}
	if lc.h.depth() > 1 {
		return nil, fmt.Errorf("%w: Cond %q: Wait with a re-entered lock would keep it", ErrInvalidArgument, shortName(cd.info.Name))
	}
	ctx, wctx := lc.parent, lc.parent
	// A deadline the caller added to the lock context bounds the wait for
	// a signal (not the re-acquisition, whose lock context must not end
	// with it).
	ldl, lok := lc.Deadline()
	if dl, ok := lctx.Deadline(); ok && (!lok || dl.Before(ldl)) {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(wctx, dl)
		defer cancel()
	}
	owner := lc.h.owner
	if o, ok := OwnerOf(ctx); !ok || o != owner {
		// The lock context's owner was made by LockContext (ctx brought
		// none): the re-acquisition is for it, not for a new one.
		ctx = withOwnerVal(ctx, ownerVal{owner: owner})
	}
	wctx, ob := c.observe(wctx, cd.info, owner, false)
	w := condWaiter{cd: cd, id: c.attemptID(), lease: leaseMS(c.cfg.lease)}
	if err := idempotent(lctx, w.register); err != nil {
		ob.done(nil, false, 0, err)
		return nil, wrapErr(KindCond, cd.info.Name, err)
	}
	if err := m.UnlockContext(lctx); err != nil {
		w.leave(true)
		ob.done(nil, false, 0, err)
		return nil, err
	}
	attempts, err := waitLoop(c, wctx, cd.ch, w.id, false, condProto{&w})
	if err != nil {
		w.leave(true)
		ob.done(nil, false, attempts, err)
		return nil, wrapErr(KindCond, cd.info.Name, err)
	}
	ob.done(nil, false, attempts, nil)
	// Taken off the critical path: if it does not get through, the place
	// lapses and the signal passes on (an extra wakeup, never a lost one).
	c.background(func(bctx context.Context) { _ = w.leaveExec(bctx, false) })
	nctx, err := m.LockContext(ctx)
	if err != nil {
		// Woken, but gone without the lock: another waiter gets the turn.
		c.background(func(bctx context.Context) { _ = cd.exec(bctx, false) })
		return nil, err
	}
	return nctx, nil
}

// WaitLocked is Wait for a Mutex held through Lock, as code written for
// sync.Cond holds it:
//
//	m.Lock()
//	for !ready() {
//		if err := cd.WaitLocked(ctx); err != nil {
//			break // the lock is held all the same
//		}
//	}
//	m.Unlock()
//
// It atomically releases the hold Lock took and waits for a Signal or
// Broadcast, or for ctx to end, then takes the lock again as Lock does
// (waiting, through Redis errors, for as long as it takes) and returns nil
// when signalled, else the error that ended the wait (errors.Is ctx.Err()
// when ctx ended). Either way the lock is held again, so m.Unlock stays
// right; only ErrClosed returns without it (Close released it). If m is
// not held through Lock, WaitLocked returns an error matching ErrNotHeld
// and waits for nothing; a hold taken by LockContext goes to Wait.
func (cd *Cond) WaitLocked(ctx context.Context) error {
	if cd.m == nil {
		return fmt.Errorf("%w: Cond of a nil Mutex", ErrInvalidArgument)
	}
	m := cd.m
	if err := m.c.checkCall(ctx, m.err); err != nil {
		return wrapErr(KindCond, cd.info.Name, err)
	}
	owner, ok := m.lk.pop()
	if !ok {
		how := "take it with Lock first"
		if m.heldByContext() {
			how = "it is held through LockContext: pass its lock context to Wait"
		}
		return &lockError{kind: KindCond, name: cd.info.Name, err: fmt.Errorf("%w: WaitLocked needs the Mutex held through Lock: %s", ErrNotHeld, how)}
	}
	registered, err := cd.sleepLocked(ctx, owner)
	if !registered {
		m.lk.push(owner) // released nothing: still held
		return err
	}
	if errors.Is(err, ErrClosed) {
		return err
	}
	if rerr := relock(m); rerr != nil {
		if err == nil { // signalled, and gone without the lock: the turn passes on
			m.c.background(func(bctx context.Context) { _ = cd.exec(bctx, false) })
		}
		return rerr
	}
	return err
}

// sleepLocked is WaitLocked's wait: it registers the waiter, releases the
// hold of owner as Unlock does, and waits for a signal or ctx's end.
// registered is false when it did neither (and the lock is still held).
func (cd *Cond) sleepLocked(ctx context.Context, owner string) (registered bool, err error) {
	m := cd.m
	c := m.c
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.exit()
	wctx, ob := c.observe(ctx, cd.info, owner, false)
	w := condWaiter{cd: cd, id: c.attemptID(), lease: leaseMS(c.cfg.lease)}
	if err := idempotent(ctx, w.register); err != nil {
		ob.done(nil, false, 0, err)
		return false, wrapErr(KindCond, cd.info.Name, err)
	}
	// Registered first, so a signal sent once the lock is free reaches
	// this waiter. A failed release is Unlock's: logged, the lock expires
	// with its lease, and the wait goes on.
	if err := m.unlockFor(owner); err != nil {
		c.cfg.logger.Warn("dsync: WaitLocked's release failed", "kind", KindCond, "name", shortName(cd.info.Name), "err", err)
	}
	attempts, err := waitLoop(c, wctx, cd.ch, w.id, false, condProto{&w})
	ob.done(nil, false, attempts, err)
	if err != nil {
		w.leave(true)
		return true, wrapErr(KindCond, cd.info.Name, err)
	}
	c.background(func(bctx context.Context) { _ = w.leaveExec(bctx, false) })
	return true, nil
}

// relock takes m again as Lock does; ErrClosed, which Lock panics with,
// is returned.
func relock(m *Mutex) (err error) {
	defer func() {
		if x := recover(); x != nil {
			if e, ok := x.(error); ok && errors.Is(e, ErrClosed) {
				err = e
				return
			}
			panic(x)
		}
	}()
	m.Lock()
	return nil
}

// Signal wakes the longest-waiting live waiter, if any, in any process. It
// may be called with or without the lock held.
func (cd *Cond) Signal(ctx context.Context) error { return cd.signal(ctx, false) }

// Broadcast wakes every waiter waiting when it runs, in any process. It may
// be called with or without the lock held.
func (cd *Cond) Broadcast(ctx context.Context) error { return cd.signal(ctx, true) }

// signal is Signal, or with all Broadcast.
func (cd *Cond) signal(ctx context.Context, all bool) error {
	if cd.m == nil {
		return fmt.Errorf("%w: Cond of a nil Mutex", ErrInvalidArgument)
	}
	if cd.err != nil {
		return cd.err
	}
	if err := cd.m.c.checkCall(ctx, cd.m.err); err != nil {
		return err
	}
	return wrapErr(KindCond, cd.info.Name, cd.exec(ctx, all))
}

// exec runs the signal script (all: Broadcast's). A signal is not
// idempotent (a repeated one wakes one more waiter): it is sent once.
func (cd *Cond) exec(ctx context.Context, all bool) error {
	return cd.m.c.run(ctx, scripts.CondSignalCall(cd.keys, all)).Error()
}

// condWaiter is one Wait's registration in Redis.
type condWaiter struct {
	cd    *Cond
	id    string
	lease string
}

// register is idempotent: a repeat only renews the place (a new arrival
// score, after a lost reply, costs the waiter nothing it had).
func (w *condWaiter) register(ctx context.Context) error {
	return w.cd.m.c.run(ctx, scripts.CondWaitCall(w.cd.keys, w.id, w.lease)).Error()
}

// leaveExec takes the waiter out; pass: a signal it had passes on.
func (w *condWaiter) leaveExec(ctx context.Context, pass bool) error {
	return w.cd.m.c.run(ctx, scripts.CondLeaveCall(w.cd.keys, w.id, pass)).Error()
}

// leave takes the waiter out after it gave up, passing a signal it had on;
// at once if Redis answers in time, else in the background.
func (w *condWaiter) leave(pass bool) {
	w.cd.m.c.cleanupNow(context.Background(), func(ctx context.Context) error { return w.leaveExec(ctx, pass) }, nil)
}

// condProto is a Wait's waitProto: an attempt looks whether the waiter was
// signalled, and renews its place.
type condProto struct{ w *condWaiter }

func (p condProto) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	w := p.w
	c := w.cd.m.c
	code, err := c.run(ctx, scripts.CondCheckCall(w.cd.keys, w.id, w.lease)).AsInt64()
	if err != nil {
		return true, 0, err
	}
	if code < 0 || code > 2 {
		return true, 0, errors.New("dsync: unexpected reply from the cond script")
	}
	return code != 0, -1, nil
}

// failed: the look changes nothing but the place, so a lost reply needs
// no undo; Wait takes the waiter out.
func (condProto) failed(error)                {}
func (condProto) waiting()                    {}
func (condProto) gaveUp()                     {}
func (condProto) granted(uint64, uint64) bool { return false }
