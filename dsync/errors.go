package dsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

var (
	// ErrNotHeld is returned by a release when the owner in the context does
	// not hold the lock.
	ErrNotHeld = errors.New("dsync: lock not held by this owner")

	// ErrLockLost is the cause (see context.Cause) of a lock context
	// cancelled because the lock was lost.
	ErrLockLost = errors.New("dsync: lock lost")

	// ErrClosed is returned by every call on a Client after Close, and is the
	// cause of lock contexts that were still held when the Client closed.
	ErrClosed = errors.New("dsync: client closed")

	// ErrInvalidArgument is returned for arguments that can never succeed:
	// an empty or too long name, a nil context, n <= 0, n above a size.
	ErrInvalidArgument = errors.New("dsync: invalid argument")

	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader.
	ErrNoLeader = errors.New("dsync: election has no leader")

	// ErrWrongContext is returned, naming the lock, by a release whose
	// context carries no hold of the lock: the parent context instead of
	// the lock context, an UnlockContext after Lock, another lock's
	// context, or a lock context of another Client (a lock context is
	// released only through the Client that took it). The lock stays
	// held. It matches ErrNotHeld too.
	ErrWrongContext error = notHeldError("dsync: the context carries no hold of this lock")

	// errReleased is the cause of a lock context cancelled by its release.
	errReleased = errors.New("dsync: lock released")
)

// An unreachableError is the error of a Redis call whose connection could
// not be made or broke before the reply (see sharedDial.unreachable): it
// says which Redis, and that the call may be tried again. errors.Is and
// errors.As see the error it wraps (io.EOF, a *net.OpError, ...).
type unreachableError struct {
	addr string
	err  error
	// once: a call that must not be simply repeated says why (see
	// notIdempotent).
	once string
}

func (e *unreachableError) Error() string {
	var oe *net.OpError
	sent := !errors.As(e.err, &oe) || oe.Op != "dial"
	msg := "dsync: Redis at " + e.addr + " could not be reached (" + e.err.Error() + ")"
	switch {
	case !sent:
		msg += ": nothing was sent; the call may be retried once Redis is back"
	case e.once != "":
		msg += ": the connection broke before the reply; " + e.once
	default:
		msg += ": the connection broke before the reply; the call may be retried once Redis is back (a failed acquisition holds nothing)"
	}
	return msg
}

func (e *unreachableError) Unwrap() error { return e.err }

// notIdempotent marks err, if Redis could not be reached, as the error of
// a call that may have been applied and must not be simply repeated: why
// says so, and what to do.
func notIdempotent(err error, why string) error {
	ue, ok := err.(*unreachableError)
	if !ok {
		return err
	}
	u := *ue
	u.once = why
	return &u
}

// notHeldError is an error that matches ErrNotHeld.
type notHeldError string

func (e notHeldError) Error() string { return string(e) }
func (e notHeldError) Unwrap() error { return ErrNotHeld }

// A lockError names the lock an error is about; errors.Is and errors.As
// see the error it wraps.
type lockError struct {
	kind Kind
	name string
	err  error
}

func (e *lockError) Error() string {
	return "dsync: " + string(e.kind) + " " + fmt.Sprintf("%q", shortName(e.name)) + ": " + strings.TrimPrefix(e.err.Error(), "dsync: ")
}

func (e *lockError) Unwrap() error { return e.err }

// notHeld is the error of a release through ctx that found no hold of the
// lock (kind, name) for the owner ctx carries (hasOwner false: it carries
// none). acquire names the call whose lock context the release takes.
// A context that carries no owner, or that is the lock context of another
// lock, is the wrong context (ErrWrongContext); otherwise the owner's hold
// was released already, or lost, or never taken.
func notHeld(ctx context.Context, kind Kind, name, acquire string, hasOwner bool) error {
	if !hasOwner || otherLock(ctx, kind, name) {
		return &lockError{kind: kind, name: name, err: fmt.Errorf("%w: pass the lock context that %s returned (a lock that Lock took is released by Unlock)", ErrWrongContext, acquire)}
	}
	return &lockError{kind: kind, name: name, err: fmt.Errorf("%w (released already, lost, or never acquired by it)", ErrNotHeld)}
}

// otherClient refuses a release through c of the lock (kind, name), by
// the call release, with a context that derives from a lock context
// another Client made: c holds nothing of that hold, and a release that
// reached Redis would free the lock under the Client that holds it, whose
// lock context would stay live. nil if ctx derives from no lock context,
// or from one of c's. It does not allocate unless it refuses.
func (c *Client) otherClient(ctx context.Context, kind Kind, name, release string) error {
	lc, ok := ctx.Value(lockCtxKey{}).(*lockCtx)
	if !ok || lc.h == nil || lc.h.c == c {
		return nil
	}
	h := lc.h
	return &lockError{kind: kind, name: name, err: fmt.Errorf("%w: it is the lock context of %s %q taken through Client %s, not through this Client (%s): call %s on that Client's %s",
		ErrWrongContext, h.lock.Kind, shortName(h.lock.Name), h.c.ident, c.ident, release, kindTitle(kind))}
}

// kindTitle is the Go type of a lock of kind k that takes lock contexts,
// for errors that say what to call.
func kindTitle(k Kind) string {
	switch k {
	case KindMutex:
		return "Mutex"
	case KindFairMutex:
		return "FairMutex"
	case KindRWMutex:
		return "RWMutex"
	case KindSemaphore:
		return "Semaphore"
	case KindElection:
		return "Election"
	case KindCond:
		return "Cond"
	}
	return string(k)
}

// otherLock reports whether ctx derives from the lock context of a lock
// other than (kind, name).
func otherLock(ctx context.Context, kind Kind, name string) bool {
	if ctx == nil {
		return false
	}
	lc, ok := ctx.Value(lockCtxKey{}).(*lockCtx)
	return ok && lc.h != nil && (lc.h.lock.Kind != kind || lc.h.lock.Name != name)
}

// renameErr is wrapErr naming the lock (kind, name) instead of the lock
// err names, if any: an Election's error from its inner lock.
func renameErr(kind Kind, name string, err error) error {
	if le, ok := err.(*lockError); ok {
		err = le.err
	}
	return wrapErr(kind, name, err)
}

// wrapErr names the lock in an error: a Redis error, a wait ended by its
// context, ErrNotHeld, an ErrInvalidArgument that does not name it (a nil
// context, a bad name). errors.Is and errors.As see through it. ErrClosed
// passes unchanged (it is about the Client), and so does an error that
// names a lock already.
func wrapErr(kind Kind, name string, err error) error {
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	if errors.Is(err, ErrInvalidArgument) && strings.Contains(err.Error(), fmt.Sprintf("%q", shortName(name))) {
		return err // names the lock already
	}
	var le *lockError
	if errors.As(err, &le) {
		return err
	}
	return &lockError{kind: kind, name: name, err: err}
}

func shortName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}

// ownErr turns a context error that rueidis returned while the caller's
// context was still live (its own dial or handshake timeout) into a plain
// error, so errors.Is(err, context.DeadlineExceeded) holds only when the
// caller's context ended the call.
func ownErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("dsync: redis connection: %v", err)
	}
	return err
}

// budgetError is the error of a release whose own budget (cleanupCtx) ran
// out while the caller's context was live: Redis did not answer within
// cleanupTimeout, most likely because the process was paused or starved
// that long (or Redis was slow). It does not match the context error it
// carries: errors.Is(err, context.DeadlineExceeded) holds only when the
// caller's own context ended the call.
type budgetError struct{ err error }

func (e *budgetError) Error() string {
	return fmt.Sprintf("dsync: the release got no reply from Redis within its %v budget (%v): it may not have taken effect; if not, the hold ends when its lease runs out (the process was paused or starved that long, or Redis was slow)", cleanupTimeout, e.err)
}

// releaseErr is the error a release through ctx returns: err, or, if err is
// a deadline while ctx's own deadline (if any) is still ahead, a budgetError
// that says so, in the lockError that names the lock. (A release runs under
// its budget, not under ctx's cancellation: cleanupCtx. Whether ctx was
// cancelled says nothing, since the release itself cancels a lock context;
// only a deadline of ctx's that has passed makes the timeout ctx's.)
func releaseErr(ctx context.Context, err error) error {
	if err == nil || ctx == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return err
	}
	var le *lockError
	if errors.As(err, &le) {
		inner := le.err
		if errors.As(inner, new(*budgetError)) {
			return err
		}
		return &lockError{kind: le.kind, name: le.name, err: &budgetError{err: inner}}
	}
	return &budgetError{err: err}
}

// refused says whether Redis refused a command for good: the Client's ACL
// user may not run it (NOPERM, or inside a script the error Redis 7 gives
// for a command the user lacks). Retrying does not help.
func refused(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "user executing the script can't run")
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
