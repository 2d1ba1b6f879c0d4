package dsync

// The concurrency contract of dsync's internals: every mutex of the
// package, the order they are taken in, and the rules that keep it.
//
// # Lock order
//
// A goroutine that holds a mutex takes only mutexes to its right in these
// chains, never one to its left (each arrow is a path of the code that
// takes the second while it holds the first):
//
//	notifier.opMu → notifier.subsMu → subscription.gmu
//	notifier.subsMu → Client.mu
//	Group.mu → Client.mu
//	mutexState.mu → Client.mu → leaseClock.mu → hold.mu
//	mutexState.mu → tagger.mu
//
// The paths, each checked by reading the code:
//
//   - notifier.opMu (an RWMutex; the notifier's loop takes it alone,
//     subscribers shared with TryRLock, never waiting for it) →
//     notifier.subsMu: connect, sweep, subscribeNow.
//   - notifier.subsMu → subscription.gmu: deliver (setGrant).
//   - notifier.subsMu → Client.mu: startReceiveLocked, from the sharded
//     loop and awaitSharded.
//   - Group.mu → Client.mu: leaveLocked → unwait → background → spawn.
//   - mutexState.mu → Client.mu: passOnLocked's local handoff
//     (trackUntil) and qlock.acquire (track); and a released hold's end
//     under it (passOnLocked's local handoff: endLocked takes
//     leaseClock.mu, untag spawns a cleanup).
//   - mutexState.mu → hold.mu: newCtx (acquire, shareHoldLocked), handOff,
//     confirmedWithin, isEnded, depth, pop.
//   - mutexState.mu → tagger.mu: blockedBy, as a Mutex waiter queues,
//     and a tagged hold's end in a local handoff (untag); tagger.mu is a
//     leaf, and tagger.sendMu is taken over no other mutex.
//   - Client.mu → leaseClock.mu: trackUntil (leaseClock.add), Close
//     (leaseClock.each, collecting the holds).
//   - Client.mu → hold.mu: trackUntil, the renewer's round (its Election
//     terms, isEnded).
//   - leaseClock.mu → hold.mu: leaseClock.fire, holding (isEnded inside
//     leaseClock.each).
//
// hold.mu is last: nothing is taken under it. endLocked releases it before
// it takes leaseClock.mu; renewReply walks a chain of holds
// handed over inside the Client one hold.mu at a time; leaseClock.fire and
// overdue end the holds they find expired after letting go of their
// mutexes. No goroutine holds two mutexStates' mu at once, nor takes
// mutexState.mu under Client.mu (putMutex clears a state nobody refers
// to under Client.mu alone).
//
// The other mutexes are leaves, held over no other mutex and no call that
// takes one: dialBound.mu; lockerHolds.mu; MultiLock.mu and RedLock.mu
// (push, heldBy.popFor); and the function-local mutexes of OnceValue, of
// RedLock's round, keep and release, and of the renewer's round.
//
// # Rules
//
//   - A lost hold's end (hold.end or endLocked with lost) never runs under
//     a mutexState.mu: its holdOps.ended (Mutex.lost, qlock.ended) takes
//     the same lock's mutexState.mu, and would deadlock. So passOnLocked
//     ends a hold as lost only after unlocking st.mu, and the other ends
//     with lost (leaseClock.fire, overdue, renewReply, on the renewal
//     loop's goroutine) run under no mutexState.mu. A hold ended as
//     released or closed may end under it (holdOps.ended with lost false
//     takes no mutexState.mu).
//   - A function named ...Locked is called with a mutex held: the receiver's
//     (mutexState's ...Locked methods, leaseClock.armLocked, Group's
//     leaveLocked, notifier.startReceiveLocked: subsMu), or Client.mu
//     (Semaphore.setHoldsLocked). Two release the mutex their caller took:
//     hold.endLocked (hold.mu) and Mutex.passOnLocked (mutexState.mu).
//   - Observer hooks, loggers and lock-context cancellations run under no
//     mutex but, for a hold released under a mutexState.mu, that one
//     (passOnLocked's local handoff cancels the old hold's lock contexts;
//     context.AfterFunc callbacks run on goroutines of their own).
//   - Every getMutex reference is handed back by putMutex: see getMutex
//     for where, call by call.
//
// Which mutex guards which field is noted at each struct: Client, hold,
// mutexState, mutexWaiter, leaseClock, notifier, channelSubs,
// subscription, Group and groupCall.
