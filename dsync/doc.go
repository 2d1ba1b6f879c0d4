// Package dsync provides the sync primitives Go programs already know —
// Mutex, FairMutex, RWMutex, a weighted Semaphore, Once, WaitGroup and a
// condition variable (Cond) — shared by every process that talks to the
// same Redis, a leader Election built on them, and Group, singleflight
// across processes.
//
// # Which primitive, which API
//
// Pick the primitive as you would in package sync:
//
//   - Mutex: one holder at a time; the fastest under contention, since
//     goroutines of one process pass it on without Redis. FairMutex: one
//     holder, in arrival order across processes. RWMutex: many readers or
//     one writer. Semaphore: at most n weighted units in use.
//   - Once, OnceValue: run f once across all processes (a migration, a
//     cache fill). Group: one run for all concurrent callers of a key.
//     WaitGroup: wait for work spread over processes. Cond: sleep until
//     another process changes what a Mutex guards. Election: one leader,
//     with a value others read and watch.
//   - MultiLock: several names, all or none. RedLock: a quorum of
//     independent Redis servers, for a lock one server's failover must not
//     hand out twice.
//
// Lock and Unlock (sync.Locker) drop into code written for sync.Mutex.
// Lock blocks until the lock is held, retrying through Redis errors, but
// nothing stops your work if the lock is lost. Prefer LockContext. It
// waits only as long as its context allows, and returns a lock context
// that ends when the lock is released or lost. Run the work under the lock
// context, and pass it to UnlockContext. Passing another context (the
// parent, say) returns ErrWrongContext, naming the lock, and the lock
// stays held. TryLockContext does not wait.
//
// Use the fencing token (FencingToken) when a second holder would corrupt
// data. A lock in Redis is a lease: a holder paused past it, or a Redis
// failover, can let two holders act at once. Send the token with each
// write, and have the store reject a token lower than the highest it has
// seen. Without a fence, the lock makes overlap rare, not impossible.
//
// Connect with Dial (a URL or host:port) or NewClient (a rueidis client
// you have): one Client per process. To test code that takes locks, use
// package dsynctest: dsynctest.NewClient(t) returns a Client on a real
// redis-server when one is installed, and on an in-process server
// otherwise.
//
// # Owners and lock contexts
//
// An owner is the identity that holds a lock; it travels in a context
// (WithOwner, OwnerOf). Acquisitions whose contexts carry the same owner
// re-enter each other's holds, and each acquisition needs its own release.
// Every ...Context acquire method returns a lock context: derived from its
// argument, carrying the owner and the acquisition's fencing token
// (FencingToken), and cancelled when the hold is released or lost, with
// context.Cause ErrLockLost in the second case. Do the protected work under
// the lock context, and it stops when the lock is gone.
//
// The sync.Locker methods (Lock, Unlock, TryLock) take a fresh owner per
// Lock, so they behave like sync.Mutex: not reentrant, unlockable from any
// goroutine.
//
// # What is guaranteed, and what is not
//
// A lock in Redis is a lease. While the holder's process runs, the Client's
// watchdog renews it every lease/3 (see WithLease), and the lock context is
// cancelled, with cause ErrLockLost, as soon as the Client learns the lock
// is gone (a renewal, or a Mutex's handoff or release, finds its key gone
// or another's; such a release returns ErrNotHeld), or could not renew it
// before the lease — counted on the local monotonic clock from the send
// time of the last command Redis processed for the hold (the acquire, a
// handoff through Redis, a renewal), less 1% for clock drift and 5 ms for
// timer lateness — would have run out. A Mutex handed to another goroutine
// inside its Client without a round trip stays the same hold in Redis: the
// new holder takes over the lease clock, and a renewal reply that arrives
// after the handoff reaches it. The lock context's Err looks at that lease
// clock itself, so a holder that checks Err before acting sees the loss at
// once even if the Client has not processed it yet (a late timer, a
// process just thawed from a pause longer than its lease); Done closes as
// Err reports it. Mutual exclusion therefore holds as long as Redis keeps
// its data and a holder checks its lock context before it acts. A process
// paused longer than its lease (GC, SIGSTOP, a VM migration) in the middle
// of an action can still complete that action after its lock was granted
// to another; so can any holder after a Redis failover that lost the
// latest writes.
//
// When Redis loses a lock's data (FLUSHALL, a restart without persistence,
// a failover to a replica that lacks the latest writes), a Client that
// held it cannot know before its next contact with Redis, and another
// Client can acquire it at once. The holds it had then end with
// ErrLockLost when it learns of the loss: at its next renewal, within
// lease/3 (plus the renewal's round trip and, if the renewal met the
// server down, its retry lease/9 later), or, for a Mutex, at its next
// handoff or release through Redis if that comes first. Until then those
// holds stay valid beside the new holder. A Mutex is also still handed on
// inside that Client without a round trip, with the tokens of the block it
// reserved, but only while the hold was confirmed in Redis less than
// lease/30 ago (else the handoff goes through Redis and finds the lock
// gone): so for at most lease/30 after the send time of the last command
// Redis processed before the loss, or until the block runs out.
//
// Where correctness depends on exclusion, pass the fencing token to the
// resource and have it reject tokens lower than one it has seen. While
// Redis keeps a lock's data, its tokens grow strictly across all owners and
// processes. A token minted in Redis is the larger of the last one plus
// one and the Redis server's clock in microseconds; a Mutex's in-process
// handoffs issue the tokens of a block reserved in Redis only once the
// server clock has reached them, as measured by the Client's clock from
// the reply that reserved the block (else the handoff goes to Redis), and
// a release records the last token issued, not the block's end. So no
// token is ahead of the server clock when issued, and after any loss of
// Redis state (FLUSHALL, a restart without persistence, a failover, a
// holder's key expiring after a crash) the next token Redis mints, taken
// from the clock, is above every token issued before the loss — as long as
// the server clock does not step back, nor run slower than the Client's
// while a block is in use (a block's token can then be ahead by that drift
// over the block's age). Tokens handed out inside a Client from its block
// after the loss, in the stretch above, can be below those Redis issues
// meanwhile, or (rarely: the same µs) equal to one: the fence rejects their
// writes once it has seen a higher token, not an equal one.
//
// # Waiting
//
// A wait is bounded by its context, never by a timeout argument. When the
// context ends, the wait returns an error for which errors.Is(err,
// ctx.Err()) holds, within a few tens of milliseconds of the deadline.
//
// Two cases can take longer. First, when a context that has a deadline is
// cancelled before it, the cancellation is seen between Redis calls. A
// call in flight on a connection rueidis uses synchronously runs until its
// reply or the deadline. So against a stalled Redis, such a wait can
// return later than its cancellation. Second, rueidis makes a call that
// needs a connection wait for another call's dial of it, whatever the
// call's own context. So FairMutex, RWMutex and Semaphore run their
// attempts apart from the caller whenever the context can end. The other
// primitives do so for 10 s after a call failed without a reply. A wait
// can thus outlast its context only behind a dial that follows a
// connection lost silently, while no call was in flight.
//
// A Redis error ends a wait that takes a context: LockContext, Acquire,
// Once's Do, Group's Do, Cond's Wait, WaitGroup's Wait and Campaign return
// it, wrapped with the primitive's kind and name, with nothing held. A server
// restart thus ends the waits under way as soon as their next call to
// Redis fails; call again to wait again. Lock, the sync.Locker, retries
// through Redis errors instead.
//
// A wait leaves nothing behind in Redis. If it gave up on the reply to an
// acquisition, the acquisition is undone in the background, exactly:
//
//   - For an owner made for the call, the undo first marks the attempt
//     undone, in a key kept for a minute. An acquire still on its way to
//     Redis (rueidis may send it on another connection) then does nothing
//     when it arrives. The undo then releases whatever that owner holds.
//     The acquire only reads the mark, so a successful one writes no extra
//     key.
//   - For an owner the caller supplied, the acquire records its grant in a
//     marker key, deleted once the reply arrives. The undo takes back
//     exactly that attempt. The owner's holds through other Clients stay.
//   - A Semaphore's Acquire is undone by its waiter id in the same way.
//
// Only if Redis cannot be reached then does the acquisition stay, until
// its lease runs out.
//
// Waiters do not poll. A release publishes a message, and waiters wake on
// it. If a message is lost, a waiter looks again after at most the
// holder's remaining lease or lease/3, whichever is sooner. A Mutex's
// release publishes only when a waiter of another Client marked the lock
// at a failed attempt, so an uncontended cycle costs no PUBLISH. A waiting
// Client is counted, with its waiting goroutines, in the waiting count
// that Inspect reports.
//
// Goroutines of one Client that wait for the same lock wait in a local
// queue, and one of them talks to Redis. A Mutex's unlock hands the lock
// to the next local waiter without a round trip. The new holder's fencing
// token is the next of a block that the acquisition reserved in Redis.
// When the block (WithMaxLocalHandoffs tokens) runs out, one script
// reserves the next block and asks whether waiters of other processes are
// subscribed to the lock's channel. If so, the lock is released to them
// instead.
//
// The FIFO locks (FairMutex, RWMutex, Semaphore) are granted by the
// release. The script that frees the lock makes the head of the queue its
// holder: for a Semaphore, every waiter at the head whose permits fit;
// after an RWMutex write release, every reader that waited. It tells each
// grantee on a channel that its Client subscribes once for the lock. A
// waiter thus sends one script, the one that queues it, and receives its
// grant. A lost message is found by the waiter's next look, at once when
// the subscription broke. The grant's lease runs in Redis from the grant,
// and the grantee counts it from there too. The message carries the
// grant's server time. The grantee reads it against its last attempt,
// which was sent before Redis ran it and whose reply carries the server
// time. So the local lease clock starts no later than Redis's, and the
// grantee keeps the rest of its lease however long after that attempt the
// grant came. A grant seen with less than half its lease left is claimed
// again with an attempt. That attempt restarts the lease in Redis if the
// grant is still there, and otherwise the wait goes on. So an acquisition
// does not return a lock context whose lease ran out while its grant was
// on the way (WithLeaseTime). A wait that ends after its grant releases
// what it was granted.
//
// # Keys
//
// Every key and channel of one lock is "<prefix>:{<name>}:<kind>..." with
// the name as the Redis Cluster hash tag ('%' and '}' in names are escaped as
// %25 and %7D), so each script touches one slot. A released mutex leaves a
// small marker key, "free, last token T", for the rest of the released
// hold's lease; the next fencing token continues from it, and after it from
// the server clock, which has passed every token issued under the hold.
//
// # Cluster, Sentinel, replicas
//
// NewClient takes a rueidis standalone, sentinel or cluster client; Dial
// makes one from the addresses or URL of any of the three. In a
// Redis 7 cluster, wakeups use sharded pub/sub: scripts publish with
// SPUBLISH and waiters subscribe with SSUBSCRIBE on the master that owns the
// lock's slot, following the slot when it moves. WithReplicaSync makes an
// acquisition wait for replicas (WAIT). Replication stays asynchronous: a
// failover can still let a second owner in, which the fencing token lets a
// protected store detect. The repository's docs/scale-out.md states what
// each mode guarantees.
package dsync
