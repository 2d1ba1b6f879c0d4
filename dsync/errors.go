package dsync

import "errors"

var (
	// ErrNotHeld is returned by a release when the owner in the context does
	// not hold the lock (never acquired it, already released it, or lost it).
	ErrNotHeld = errors.New("dsync: lock not held by this owner")

	// ErrLockLost is the cause (see context.Cause) of a lock context that was
	// cancelled because the lock was lost: its lease ran out before it could
	// be renewed, or the key was removed from Redis.
	ErrLockLost = errors.New("dsync: lock lost")

	// ErrClosed is returned by every call on a Client after Close, and is the
	// cause of lock contexts that were still held when the Client closed.
	ErrClosed = errors.New("dsync: client closed")

	// ErrInvalidArgument is returned for arguments that can never succeed:
	// an empty or too long name, a nil context, n <= 0, n above a size.
	ErrInvalidArgument = errors.New("dsync: invalid argument")

	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader: nobody campaigned, the leader resigned, or it lost its lease
	// and no candidate has taken over yet.
	ErrNoLeader = errors.New("dsync: election has no leader")

	// errReleased is the cause of a lock context cancelled by its release.
	errReleased = errors.New("dsync: lock released")
)
