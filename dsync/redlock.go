package dsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultNodeTimeout bounds one RedLock node's acquisition.
const DefaultNodeTimeout = 100 * time.Millisecond

// WithNodeTimeout bounds each node's acquisition in a RedLock
// (DefaultNodeTimeout if d <= 0): a node that has not answered in d counts
// as failed for that round. Other locks ignore it.
func WithNodeTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d > 0 {
			c.nodeTimeout = d
		}
	}
}

// errNodeTimeout ends a node's acquisition that took longer than the node
// timeout.
var errNodeTimeout = errors.New("dsync: RedLock node timeout")

// A RedLock is the Redlock algorithm: a lock held on a majority of N
// independent Redis deployments, one Client each, so that it survives a
// minority of them failing. It gives no fencing token, and its safety rests
// on bounded clock drift and process pauses shorter than the lease; see
// docs/scale-out.md.
//
// A RedLock is safe for concurrent use. Its zero value is not usable; create
// one with NewRedLock. It must not be copied after first use.
type RedLock struct {
	name   string
	nodes  []*Mutex
	quorum int
	lease  time.Duration
	timeo  time.Duration
	err    error

	mu   sync.Mutex
	held heldBy[*redHold]
	lk   lockerHolds // the hold taken by Lock or TryLock
}

type redHold struct {
	ctxs    []context.Context // member lock contexts by node; nil where not held
	cancels []context.CancelCauseFunc
	stops   []func() bool
	cancel  context.CancelCauseFunc
}

// NewRedLock returns the RedLock called name over clients, one per
// independent Redis deployment. The lease is WithLeaseTime's, or else the
// shortest lease of the clients. An invalid name, no clients, a nil client
// or two clients of one deployment (an address in common) makes every call
// fail with ErrInvalidArgument.
func NewRedLock(name string, clients []*Client, opts ...LockOption) *RedLock {
	lc := newLockConfig(opts)
	rl := &RedLock{name: name, quorum: len(clients)/2 + 1, lease: lc.leaseTime, timeo: lc.nodeTimeout,
		held: heldBy[*redHold]{}, err: checkName(name)}
	if rl.timeo == 0 {
		rl.timeo = DefaultNodeTimeout
	}
	if len(clients) == 0 {
		rl.err = fmt.Errorf("%w: RedLock without clients", ErrInvalidArgument)
	}
	for _, c := range clients {
		if c == nil {
			rl.err = fmt.Errorf("%w: nil Client in RedLock", ErrInvalidArgument)
			return rl
		}
		if lc.leaseTime == 0 && (rl.lease == 0 || c.cfg.lease < rl.lease) {
			rl.lease = c.cfg.lease
		}
		for i, m := range rl.nodes {
			if m.c == c || overlap(m.c.addrs(), c.addrs()) {
				rl.err = fmt.Errorf("%w: RedLock %q: clients %d and %d reach the same Redis (%s): give NewRedLock one Client per independent deployment",
					ErrInvalidArgument, shortName(name), i, len(rl.nodes), strings.Join(c.addrs(), ","))
				return rl
			}
		}
		rl.nodes = append(rl.nodes, c.NewMutex(name, opts...))
	}
	return rl
}

// where lists the addresses of all of rl's nodes, sorted.
func (rl *RedLock) where() []string {
	var a []string
	for _, m := range rl.nodes {
		a = append(a, m.c.addrs()...)
	}
	slices.Sort(a)
	return slices.Compact(a)
}

// sameAs: a RedLock of the same name over the same deployments.
func (rl *RedLock) sameAs(o orderedLocker) bool {
	rl2, ok := o.(*RedLock)
	return ok && rl2.orderKey() == rl.orderKey() && slices.Equal(rl2.where(), rl.where())
}

func (rl *RedLock) orderKey() string {
	if len(rl.nodes) == 0 {
		return ""
	}
	// Apart from the Mutex of the same name, which a MultiLock must not
	// take for a duplicate of this RedLock.
	return rl.nodes[0].key + ":redlock"
}

// LockContext acquires rl on a majority of nodes for the owner ctx carries,
// retrying until it is held or ctx is done; it fails at once when no
// majority can be reached. The lock context has no fencing token and is
// cancelled with ErrLockLost when no majority of holds remains.
func (rl *RedLock) LockContext(ctx context.Context) (context.Context, error) {
	if err := rl.check(ctx); err != nil {
		return nil, err
	}
	ctx, owner := ownerFrom(ctx, processName())
	lctx, _, err := rl.acquire(ctx, owner, false)
	return lctx, err
}

// TryLockContext is one round of LockContext: false and a nil error when
// other owners hold the lock.
func (rl *RedLock) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	if err := rl.check(ctx); err != nil {
		return nil, false, err
	}
	ctx, owner := ownerFrom(ctx, processName())
	return rl.acquire(ctx, owner, true)
}

// acquire runs rounds (round) in the wait loop (waitLoop) until one holds
// rl, ctx is done or a round fails; with try, one round. The wait spans
// the nodes' Clients, so it has none of its own (waitLoop's nil Client):
// no message wakes it, since a release on one node says little of a
// majority and contenders woken together would split the nodes again;
// between rounds it waits a random delay.
func (rl *RedLock) acquire(ctx context.Context, owner string, try bool) (context.Context, bool, error) {
	a := redAttempt{rl: rl, owner: owner}
	if _, err := waitLoop(nil, ctx, "", "", try, redWait{&a}); err != nil {
		return nil, false, wrapErr(KindRedLock, rl.name, err)
	}
	return a.lctx, a.lctx != nil, nil
}

// redAttempt is the state of one RedLock acquisition.
type redAttempt struct {
	rl    *RedLock
	owner string
	lctx  context.Context // the lock context of the round that held rl
}

// redWait is a RedLock acquisition's waitProto: an attempt is a round,
// which releases whatever it took unless it holds rl, so nothing is left
// to undo.
type redWait struct{ a *redAttempt }

func (w redWait) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	lctx, ok, err := w.a.rl.round(ctx, w.a.owner)
	if err != nil || ok {
		w.a.lctx = lctx
		return true, 0, err
	}
	// Random, so that contenders that split the nodes do not collide
	// again in lockstep.
	return false, 10*time.Millisecond + rand.N(50*time.Millisecond), nil
}

func (redWait) failed(error) {} // a failed round released what it took

func (redWait) waiting() {}

func (redWait) gaveUp() {}

func (redWait) granted(uint64, uint64) bool { return false } // no channel

func (rl *RedLock) check(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if rl.err != nil {
		return rl.err
	}
	return wrapErr(KindRedLock, rl.name, ctx.Err())
}

// round tries every node once, in parallel. It waits for the nodes at most
// the node timeout (plus a little grace for the replies to be handled): a
// node that stalls (its process paused, say) must not hold the round up,
// and the Mutex's own cleanup of a cancelled call may take longer. Such a
// straggler, should it still acquire, releases its hold itself.
func (rl *RedLock) round(ctx context.Context, owner string) (context.Context, bool, error) {
	n := len(rl.nodes)
	rh := &redHold{ctxs: make([]context.Context, n), cancels: make([]context.CancelCauseFunc, n)}
	errs := make([]error, n)
	for i := range errs {
		errs[i] = errNodeTimeout
	}
	var (
		mu        sync.Mutex
		abandoned bool
		answered  int
		all       = make(chan struct{})
	)
	start := time.Now()
	for i, m := range rl.nodes {
		go func() {
			// The node's lock context derives from actx, which must outlive
			// the acquisition; so the timeout cancels it only if it fires
			// before the node answered.
			actx, cancel := context.WithCancelCause(ctx)
			timer := time.AfterFunc(rl.timeo, func() { cancel(errNodeTimeout) })
			lctx, ok, err := m.TryLockContext(actx)
			late := !timer.Stop()
			mu.Lock()
			switch {
			case ok && (late || abandoned):
				err = errNodeTimeout
			case err != nil && errors.Is(context.Cause(actx), errNodeTimeout):
				err = errNodeTimeout
			}
			if !abandoned {
				errs[i] = err
				if ok && err == nil {
					rh.ctxs[i], rh.cancels[i] = lctx, cancel
				}
				if answered++; answered == n {
					close(all)
				}
			}
			mu.Unlock()
			if ok && err != nil {
				_ = m.UnlockContext(lctx)
			}
			if !ok || err != nil {
				cancel(nil)
			}
		}()
	}
	grace := time.NewTimer(rl.timeo + rl.timeo/4 + 10*time.Millisecond)
	select {
	case <-all:
	case <-grace.C:
	}
	grace.Stop()
	mu.Lock()
	abandoned = true
	mu.Unlock()
	held, reached := 0, 0
	for i := range rl.nodes {
		if rh.ctxs[i] != nil {
			held++
		}
		if errs[i] == nil {
			reached++
		}
	}
	validity := rl.lease - time.Since(start) - (rl.lease/100 + 2*time.Millisecond)
	if held >= rl.quorum && validity > 0 {
		return rl.keep(ctx, owner, rh), true, nil
	}
	rl.release(ctx, owner, rh, errs)
	if err := ctx.Err(); err != nil {
		return nil, false, wrapErr(KindRedLock, rl.name, err)
	}
	if reached < rl.quorum {
		return nil, false, wrapErr(KindRedLock, rl.name, fmt.Errorf("only %d of %d nodes answered: %w", reached, n, errors.Join(errs...)))
	}
	return nil, false, nil
}

// KindRedLock names RedLock in events and errors.
const KindRedLock Kind = "redlock"

// UnlockContext releases the innermost acquisition by the owner ctx carries
// on every node. It returns nil if a majority released it, and an error
// matching ErrNotHeld otherwise.
func (rl *RedLock) UnlockContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if rl.err != nil {
		return rl.err
	}
	rh, owner, err := rl.held.popFor(ctx, &rl.mu)
	if err != nil {
		return notHeld(ctx, KindRedLock, rl.name, "LockContext", owner != "")
	}
	err = rl.release(ctx, owner, rh, nil)
	rh.cancel(errReleased)
	return releaseErr(ctx, err)
}

// Lock acquires rl, blocking until it is held, as Mutex.Lock does.
func (rl *RedLock) Lock() { lockerLock(rl, &rl.lk) }

// TryLock tries to acquire rl once and reports whether it did.
func (rl *RedLock) TryLock() bool { return lockerTryLock(rl, &rl.lk) }

// Unlock releases the hold taken by Lock or TryLock. It is a run-time error
// (a panic) if rl was not locked by Lock or TryLock; a failed release is
// logged.
func (rl *RedLock) Unlock() { lockerUnlock(rl, &rl.lk, "unlock") }

func (rl *RedLock) lockFor(ctx context.Context, try bool) (context.Context, bool, error) {
	if try {
		return rl.TryLockContext(ctx)
	}
	lctx, err := rl.LockContext(ctx)
	return lctx, err == nil, err
}

func (rl *RedLock) unlockFor(owner string) error { return rl.UnlockContext(ownerOnly(owner)) }

func (rl *RedLock) lockerEnv() (string, string, *slog.Logger, *Client) {
	log := slog.Default()
	if len(rl.nodes) > 0 && rl.nodes[0] != nil && rl.nodes[0].c != nil {
		log = rl.nodes[0].c.cfg.logger
	}
	return "RedLock", rl.name, log, nil
}
