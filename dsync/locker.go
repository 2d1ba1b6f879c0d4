package dsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The sync.Locker side of every lock (Mutex, FairMutex, RWMutex and its
// RLocker, Semaphore.Locker, RedLock, MultiLock) is this one adapter over
// the lock's context methods, with one retry policy and one spelling of
// each failure:
//
//   - Lock makes a fresh owner for each attempt (so the undo of a failed
//     attempt can never touch a later attempt's hold), retries Redis errors
//     with backoff, logging each as a warning, and panics on the errors
//     waiting cannot cure (ErrClosed, ErrInvalidArgument);
//   - TryLock makes one attempt and reports false on any error;
//   - Unlock releases the hold Lock or TryLock took, whichever goroutine
//     calls it; a failed release is logged (the lock then expires with its
//     lease), and Unlock without such a hold panics with a message naming
//     the lock (dsync: unlock of unlocked Mutex "orders").

// lockerOps is what the adapter needs of a lock.
type lockerOps interface {
	// lockFor acquires with the owner ctx carries, or a fresh one; with
	// try it does not wait.
	lockFor(ctx context.Context, try bool) (lctx context.Context, ok bool, err error)
	// unlockFor releases one acquisition by owner.
	unlockFor(owner string) error
	// lockerEnv returns what the adapter reports and waits with: the
	// lock's description for logs and panics, the logger, and the Client
	// whose Close ends a retry (nil for locks over several Clients).
	lockerEnv() (what, name string, log *slog.Logger, c *Client)
}

// lockerHolds are the owners of the holds taken through the adapter, for
// Unlock: a stack, so that read locks taken by several RLocks are released
// one RUnlock at a time.
type lockerHolds struct {
	mu     sync.Mutex
	owners []string
}

func (hs *lockerHolds) push(owner string) {
	hs.mu.Lock()
	hs.owners = append(hs.owners, owner)
	hs.mu.Unlock()
}

func (hs *lockerHolds) pop() (string, bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	n := len(hs.owners)
	if n == 0 {
		return "", false
	}
	owner := hs.owners[n-1]
	hs.owners[n-1] = ""
	hs.owners = hs.owners[:n-1]
	return owner, true
}

// heldBy is the acquisitions of a lock that keeps them in the Client
// (MultiLock, RedLock), by owner, innermost last: UnlockContext ends the
// innermost. The lock's mutex guards it.
type heldBy[T any] map[string][]T

func (h heldBy[T]) push(owner string, v T) { h[owner] = append(h[owner], v) }

// popFor removes and returns the innermost acquisition of the owner ctx
// carries, under mu, and that owner; ErrNotHeld if there is none.
func (h heldBy[T]) popFor(ctx context.Context, mu *sync.Mutex) (T, string, error) {
	var zero T
	owner, ok := OwnerOf(ctx)
	if !ok {
		return zero, "", ErrNotHeld
	}
	mu.Lock()
	defer mu.Unlock()
	stack := h[owner]
	n := len(stack)
	if n == 0 {
		return zero, owner, ErrNotHeld
	}
	v := stack[n-1]
	if n == 1 {
		delete(h, owner)
	} else {
		stack[n-1] = zero
		h[owner] = stack[:n-1]
	}
	return v, owner, nil
}

// lockRetryLogEvery spaces the warnings of one Lock that retries through
// Redis errors: the first, then one per interval with the count since.
const lockRetryLogEvery = 10 * time.Second

// lockerLock is sync.Locker's Lock over o.
func lockerLock(o lockerOps, hs *lockerHolds) {
	ctx := context.Background()
	var logged time.Time
	unlogged := 0
	for n := 1; ; n++ {
		lctx, _, err := o.lockFor(ctx, false)
		if err == nil {
			lockerHeld(lctx)
			owner, _ := OwnerOf(lctx)
			hs.push(owner)
			return
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidArgument) {
			panic(err)
		}
		what, name, log, c := o.lockerEnv()
		if now := time.Now(); n == 1 || now.Sub(logged) >= lockRetryLogEvery {
			log.Warn("dsync: Lock retrying", "kind", lockerKind(what), "name", shortName(name), "err", err, "attempts", n, "unlogged", unlogged)
			logged, unlogged = now, 0
		} else {
			unlogged++
		}
		if c == nil {
			time.Sleep(backoff(n))
		} else if c.sleepCtx(ctx, backoff(n)) != nil {
			panic(ErrClosed)
		}
	}
}

// lockerHeld marks the hold of lctx, which Lock or TryLock took and drops,
// as one without a lock context to cancel (see ToldHolder.Locker).
func lockerHeld(lctx context.Context) {
	if lc, ok := lctx.(*lockCtx); ok {
		lc.h.byLocker.Store(true)
	}
}

// lockerTryLock is sync.Locker's TryLock over o.
func lockerTryLock(o lockerOps, hs *lockerHolds) bool {
	lctx, ok, err := o.lockFor(context.Background(), true)
	if err != nil || !ok {
		return false
	}
	lockerHeld(lctx)
	owner, _ := OwnerOf(lctx)
	hs.push(owner)
	return true
}

// lockerUnlock is sync.Locker's Unlock over o; op names the call in the
// panic ("unlock", "RUnlock").
func lockerUnlock(o lockerOps, hs *lockerHolds, op string) {
	owner, ok := hs.pop()
	what, name, log, _ := o.lockerEnv()
	if !ok {
		panic(unlockPanic(o, op, what, name))
	}
	if err := o.unlockFor(owner); err != nil {
		log.Warn("dsync: Unlock failed", "kind", lockerKind(what), "name", shortName(name), "err", err)
	}
}

// lockerKind is the Kind of the lock that lockerEnv calls what (its Go
// type, for panics), so that log records spell their "kind" attribute as
// every other record, event and error does.
func lockerKind(what string) Kind {
	switch what {
	case "Mutex":
		return KindMutex
	case "FairMutex":
		return KindFairMutex
	case "RWMutex":
		return KindRWMutex
	case "Semaphore":
		return KindSemaphore
	case "RedLock":
		return KindRedLock
	case "MultiLock":
		return kindMultiLock
	}
	return Kind(what)
}

// ownerOnly is a context carrying owner and nothing else, for a release
// by owner.
func ownerOnly(owner string) context.Context {
	return withOwnerVal(context.Background(), ownerVal{owner: owner})
}

// contextHeld is implemented by the locks that can tell whether this
// process holds them through their context methods (for Unlock's panic).
type contextHeld interface {
	heldByContext() bool
}

// unlockPanic is the message of an Unlock (op: "unlock" or "RUnlock") of
// the lock (what, name) that Lock did not lock: it names the lock, and, if
// the lock is held through the context methods, the mistake.
func unlockPanic(o lockerOps, op, what, name string) string {
	lock, unlock := "LockContext", "UnlockContext"
	if op == "RUnlock" {
		lock, unlock = "RLockContext", "RUnlockContext"
	}
	desc := what
	if name != "" {
		desc += fmt.Sprintf(" %q", shortName(name))
	}
	if ch, ok := o.(contextHeld); ok && ch.heldByContext() {
		return fmt.Sprintf("dsync: %s of %s, which Lock did not lock: it is held through %s; release it with %s(lctx), passing the lock context %s returned", op, desc, lock, unlock, lock)
	}
	return "dsync: " + op + " of unlocked " + desc
}

// holding reports whether the Client holds the lock l describes (through
// any of its values).
func (c *Client) holding(l Lock) bool {
	held := false
	c.clock.each(func(h *hold) {
		if !held && *h.lock == l && !h.isEnded() {
			held = true
		}
	})
	return held
}

func (m *Mutex) heldByContext() bool { return m.c.holding(m.info) }
func (q *qlock) heldByContext() bool { return q.c.holding(q.info) }

func (ml *MultiLock) heldByContext() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return len(ml.held) > 0
}

func (rl *RedLock) heldByContext() bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return len(rl.held) > 0
}
