package dsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// A ContextLocker is a lock held through a lock context: *Mutex, *FairMutex,
// *RWMutex (write side), *RedLock and *MultiLock all are.
type ContextLocker interface {
	LockContext(ctx context.Context) (context.Context, error)
	UnlockContext(ctx context.Context) error
}

// orderedLocker is implemented by the dsync locks whose Redis key is known,
// so that every MultiLock, in any process, takes them in the same order.
type orderedLocker interface {
	orderKey() string
}

func (m *Mutex) orderKey() string { return m.key }

// A MultiLock holds several locks as one: all of them, or none, in any
// slots, servers or Clients. Members are acquired in one global order, so
// MultiLocks over overlapping sets do not deadlock: dsync locks by their
// Redis key, then other lockers in the order given, which callers must keep
// the same everywhere.
//
// A MultiLock is safe for concurrent use. Its zero value is not usable;
// create one with NewMultiLock or Client.NewMultiLock. It must not be copied
// after first use.
type MultiLock struct {
	members []ContextLocker

	mu   sync.Mutex
	held heldBy[*multiHold]
	lk   lockerHolds // the hold taken by Lock
}

// multiHold is one acquisition of all members.
type multiHold struct {
	ctxs   []context.Context // member lock contexts, in acquisition order
	stops  []func() bool     // stop the loss watchers
	cancel context.CancelCauseFunc
}

// NewMultiLock returns a lock over lockers. Duplicate dsync locks are taken
// once. With no lockers every call fails with ErrInvalidArgument.
func NewMultiLock(lockers ...ContextLocker) *MultiLock {
	var keyed, rest []ContextLocker
	seen := make(map[string]bool)
	for _, l := range lockers {
		if l == nil {
			continue
		}
		if o, ok := l.(orderedLocker); ok {
			if !seen[o.orderKey()] {
				seen[o.orderKey()] = true
				keyed = append(keyed, l)
			}
			continue
		}
		rest = append(rest, l)
	}
	slices.SortStableFunc(keyed, func(a, b ContextLocker) int {
		return cmp.Compare(a.(orderedLocker).orderKey(), b.(orderedLocker).orderKey())
	})
	return &MultiLock{members: append(keyed, rest...), held: heldBy[*multiHold]{}}
}

// NewMultiLock returns a MultiLock over the Mutexes called names.
func (c *Client) NewMultiLock(names []string, opts ...LockOption) *MultiLock {
	lockers := make([]ContextLocker, len(names))
	for i, n := range names {
		lockers[i] = c.NewMutex(n, opts...)
	}
	return NewMultiLock(lockers...)
}

// LockContext acquires every member for the owner ctx carries, waiting until
// all are held or ctx is done; on failure it releases those it took. The
// lock context carries no fencing token (each member has its own) and is
// cancelled, with cause ErrLockLost, as soon as any member is lost.
func (ml *MultiLock) LockContext(ctx context.Context) (context.Context, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if len(ml.members) == 0 {
		return nil, fmt.Errorf("%w: MultiLock without members", ErrInvalidArgument)
	}
	ctx, owner := ownerFrom(ctx, processName())
	mh := &multiHold{}
	for _, l := range ml.members {
		lctx, err := l.LockContext(ctx)
		if err != nil {
			ml.undo(mh)
			return nil, err
		}
		mh.ctxs = append(mh.ctxs, lctx)
	}
	// The lock context derives from ctx carrying the owner only.
	octx := withOwnerVal(ctx, ownerVal{owner: owner})
	lctx, cancel := context.WithCancelCause(octx)
	mh.cancel = cancel
	for _, mctx := range mh.ctxs {
		mh.stops = append(mh.stops, context.AfterFunc(mctx, func() {
			// A member's context also ends with ctx; only a loss is a loss.
			if cause := context.Cause(mctx); errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrClosed) {
				cancel(cause)
			}
		}))
	}
	ml.mu.Lock()
	ml.held.push(owner, mh)
	ml.mu.Unlock()
	return lctx, nil
}

// undo releases the members of a partial acquisition, innermost first.
func (ml *MultiLock) undo(mh *multiHold) error {
	for _, s := range mh.stops {
		s()
	}
	// Each member's release runs under its own bounded cleanup context, and
	// runs even though ctx (or the member's lock context) may be cancelled.
	var errs []error
	for i := len(mh.ctxs) - 1; i >= 0; i-- {
		if err := ml.members[i].UnlockContext(mh.ctxs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UnlockContext releases the innermost acquisition by the owner ctx carries,
// every member, even if some fail (the errors are joined). It returns
// ErrNotHeld (ErrWrongContext if ctx carries no owner) if that owner holds
// no acquisition of ml.
func (ml *MultiLock) UnlockContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	mh, owner, err := ml.held.popFor(ctx, &ml.mu)
	if err != nil {
		return notHeld(ctx, kindMultiLock, ml.name(), "LockContext", owner != "")
	}
	err = ml.undo(mh)
	mh.cancel(errReleased)
	return err
}

// Lock acquires every member, blocking until all are held, as Mutex.Lock
// does.
func (ml *MultiLock) Lock() { lockerLock(ml, &ml.lk) }

// Unlock releases the hold taken by Lock. It is a run-time error (a panic)
// if ml was not locked by Lock; a failed release is logged.
func (ml *MultiLock) Unlock() { lockerUnlock(ml, &ml.lk, "unlock") }

func (ml *MultiLock) lockFor(ctx context.Context, _ bool) (context.Context, bool, error) {
	lctx, err := ml.LockContext(ctx)
	return lctx, err == nil, err
}

func (ml *MultiLock) unlockFor(owner string) error { return ml.UnlockContext(ownerOnly(owner)) }

func (ml *MultiLock) lockerEnv() (string, string, *slog.Logger, *Client) {
	return "MultiLock", ml.name(), slog.Default(), nil
}

// kindMultiLock names a MultiLock in errors.
const kindMultiLock Kind = "multilock"

// name names ml in errors: its members' names, as far as they are dsync
// locks.
func (ml *MultiLock) name() string {
	var b strings.Builder
	for _, l := range ml.members {
		if i, ok := l.(interface{ lockInfo() Lock }); ok {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(i.lockInfo().Name)
		}
	}
	return b.String()
}
