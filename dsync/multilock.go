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
// A lock is its key on its deployment: the same key on two deployments is
// two locks.
type orderedLocker interface {
	orderKey() string
	// where lists the addresses of the Redis deployment(s) the lock lives
	// on, sorted: they order locks of one key.
	where() []string
	// sameAs reports whether o is the same lock (taking both would take
	// one twice).
	sameAs(o orderedLocker) bool
}

func (m *Mutex) orderKey() string { return m.key }

func (m *Mutex) where() []string { return m.c.addrs() }

// sameAs: a Mutex of the same key through the same Client, or through a
// Client of the same deployment (one address in common).
func (m *Mutex) sameAs(o orderedLocker) bool {
	m2, ok := o.(*Mutex)
	if !ok || m2.key != m.key {
		return false
	}
	return m2.c == m.c || overlap(m.c.addrs(), m2.c.addrs())
}

// addrs lists the addresses of the Redis nodes c's rueidis client knows,
// sorted: its deployment, as far as the Client can tell without a round
// trip. Two Clients whose lists share an address reach one deployment.
func (c *Client) addrs() []string {
	nodes := c.rc.Nodes()
	a := make([]string, 0, len(nodes))
	for addr := range nodes {
		a = append(a, addr)
	}
	slices.Sort(a)
	return a
}

// overlap reports whether the sorted lists a and b share an element.
func overlap(a, b []string) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch cmp.Compare(a[i], b[j]) {
		case 0:
			return true
		case -1:
			i++
		default:
			j++
		}
	}
	return false
}

// A MultiLock holds several locks as one: all of them, or none, in any
// slots, servers or Clients. A dsync lock is its key on its deployment:
// Mutexes of one name on two servers are two members; behind two Clients
// of one deployment, one, taken once. Members are acquired in one global
// order, so MultiLocks over overlapping sets do not deadlock: dsync locks
// by their Redis key, then their deployment's addresses (spell them alike
// everywhere), then other lockers in the order given, which callers must
// keep the same everywhere.
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

// NewMultiLock returns a lock over lockers. Duplicate dsync locks (same key
// on the same deployment) are taken once. With no lockers every call fails
// with ErrInvalidArgument.
func NewMultiLock(lockers ...ContextLocker) *MultiLock {
	type keyed struct {
		l     ContextLocker
		o     orderedLocker
		key   string
		where string
	}
	var ks []keyed
	var rest []ContextLocker
next:
	for _, l := range lockers {
		if l == nil {
			continue
		}
		o, ok := l.(orderedLocker)
		if !ok {
			rest = append(rest, l)
			continue
		}
		for _, k := range ks {
			if k.key == o.orderKey() && k.o.sameAs(o) {
				continue next
			}
		}
		ks = append(ks, keyed{l: l, o: o, key: o.orderKey(), where: strings.Join(o.where(), ",")})
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.where, b.where))
	})
	members := make([]ContextLocker, 0, len(ks)+len(rest))
	for _, k := range ks {
		members = append(members, k.l)
	}
	return &MultiLock{members: append(members, rest...), held: heldBy[*multiHold]{}}
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
			if cause := memberLoss(mctx); cause != nil {
				cancel(cause)
			}
		}))
	}
	ml.mu.Lock()
	ml.held.push(owner, mh)
	ml.mu.Unlock()
	return &compositeCtx{Context: lctx, cancel: cancel, lost: func() error {
		for _, mctx := range mh.ctxs {
			// (memberLoss asks the member's Err, which ends it if its
			// lease ran out.)
			if cause := memberLoss(mctx); cause != nil {
				return cause
			}
		}
		return nil
	}}, nil
}

// memberLoss is the cause of a member lock context's end if it was a loss
// (ErrLockLost, or ErrClosed: its Client's Close), nil if it is live or
// ended otherwise (a member's context also ends with the caller's ctx).
func memberLoss(mctx context.Context) error {
	if mctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(mctx); errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrClosed) {
		return cause
	}
	return nil
}

// A compositeCtx is the lock context of a MultiLock or a RedLock: its Err
// asks the members' lock contexts, whose own Err knows at once that a
// lease ran out, so a loss is reported on the first look after it, as a
// Mutex's lock context reports it. (Their cancellation reaches the
// composite through context.AfterFunc, a goroutine later: a process
// frozen past its lease (SIGSTOP, a VM pause) and thawed looked before
// that goroutine ran, and saw its MultiLock valid 1.5 s after another
// process took a member: TestFaultChaos/multi in CI of 3aa5018.)
type compositeCtx struct {
	context.Context
	cancel context.CancelCauseFunc
	lost   func() error // the loss the members report now, if any
}

func (c *compositeCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if cause := c.lost(); cause != nil {
		c.cancel(cause)
		return c.Context.Err()
	}
	return nil
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
	return releaseErr(ctx, err)
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
