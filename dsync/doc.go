// Package dsync provides Go's sync primitives across processes, on Redis:
// every process that uses the same Redis and name shares the primitive.
//
// # Which primitive
//
//   - Mutex: one holder at a time; the fastest under contention, since
//     goroutines of one process pass it on without Redis (to waiting
//     processes after WithMaxLocalHandoffs handoffs).
//   - FairMutex: one holder, in arrival order across processes.
//   - RWMutex: many readers or one writer.
//   - Semaphore: at most n weighted units in use.
//   - Once, OnceValue: run f once across all processes (a migration, a
//     cache fill).
//   - Group: one run for all concurrent callers of a key.
//   - WaitGroup: wait for work spread over processes.
//   - Cond: sleep until another process changes what a Mutex guards.
//   - Election: one leader, with a value others read and watch.
//   - MultiLock: several names, all or none.
//   - RedLock: a quorum of independent Redis servers, for a lock one
//     server's failover must not hand out twice.
//
// # Which API
//
// Connect with Dial (a URL or host:port) or NewClient (a rueidis client):
// one Client per process.
//
// Lock and Unlock (sync.Locker) drop into code written for sync.Mutex: not
// reentrant, unlockable from any goroutine. Lock retries through Redis
// errors, but nothing stops your work if the lock is lost. Prefer
// LockContext: it waits as long as its context allows and returns a lock
// context, carrying the owner and fencing token, that is cancelled when the
// lock is released or lost (context.Cause ErrLockLost). Work under it and
// pass it to UnlockContext; another context (the parent, say) returns
// ErrWrongContext and the lock stays held, as does a release through
// another Client than the one that took it. TryLockContext does not wait.
// Acquisitions whose contexts carry the same owner (WithOwner) re-enter;
// each needs its own release.
//
// # What is guaranteed, and what is not
//
// A lock in Redis is a lease, renewed every lease/3 while its process runs
// (WithLease; WithLeaseTime: fixed). The lock context is cancelled with
// ErrLockLost as soon as the Client learns the lock is gone (a release that
// finds it gone returns ErrNotHeld), or could not renew it before the
// lease, on the local clock less a drift margin, ran out; its Err reads that
// clock itself. So mutual exclusion holds while Redis keeps its data and
// holders check their lock context before acting.
//
// It does not hold against a process paused past its lease (GC, SIGSTOP) in
// the middle of an action, nor when Redis loses data (FLUSHALL, a restart
// without persistence, a failover to a stale replica): another Client can
// acquire at once, and the old holds end with ErrLockLost only at their
// Client's next contact with Redis (a renewal, within about lease/3; 5/3
// lease for a deleted Mutex key: docs/design.md); a
// Mutex may meanwhile still pass among that Client's goroutines for at
// most lease/30.
//
// A wait is bounded by its context, never by a timeout argument. Ended by
// it, a wait returns an error for which errors.Is(err, ctx.Err()) holds,
// within tens of milliseconds of the deadline (later only behind a stalled
// Redis or a dial), and leaves nothing behind in Redis (if Redis is
// unreachable, the lease ends it); a Mutex attempt whose reply was lost
// can still take the lock for 2 s, and is undone again until then. A
// Redis error ends a wait that takes a context (LockContext, Acquire,
// Campaign, Do, Wait), wrapped with the primitive's kind and name, nothing
// held (call again to wait again); Lock retries instead. Waiters do not
// poll: a release wakes them; a lost wakeup costs at most lease/3.
//
// A release unanswered within its own 2 s budget says so (docs/design.md).
//
// # Fencing
//
// Where a second holder would corrupt data, send the lock's fencing token
// (FencingToken) with each write and have the store reject a token lower
// than the highest it has seen. Tokens of one name grow strictly across
// owners and processes, and, following the Redis server's clock (unless it
// steps back), stay above every earlier token after Redis loses data;
// only the Mutex handoffs above can carry a lower (rarely equal) one.
// Without a fence, the lock makes overlap rare, not impossible.
//
// # Deployments
//
// A Client works with a standalone server, Sentinel or a Cluster; every key
// of one lock shares the hash tag {name}, so it lives in one slot.
// Replication is asynchronous, even with WithReplicaSync: a failover can
// let a second owner in, which the fencing token lets a store detect
// (docs/scale-out.md). The Mutex's acquire and release run as Redis
// functions where the server allows them (FCALL: an ACL user needs
// +fcall and +function|load), and as scripts (EVALSHA) where it does not.
//
// # Testing
//
// dsynctest.NewClient(t) gives a test a Client on a real redis-server when
// one is installed, and on an in-process server otherwise.
//
// How waits, handoffs, tokens, renewal and Close work: [docs/design.md].
//
// [docs/design.md]: https://github.com/dsync/dsync/blob/main/docs/design.md
package dsync
