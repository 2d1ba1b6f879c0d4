package dsync

import "time"

// ReleaseBatch is how many holds Close releases per batch script call.
const ReleaseBatch = releaseBatch

// GroupCallers returns how many callers of key wait in g's process (the
// leader among them), so tests know every caller has joined.
func GroupCallers[V any](g *Group[V], key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc := g.calls[key]; gc != nil {
		return gc.n
	}
	return 0
}

// Preloaded is closed when c's preload of its scripts has ended, so that
// tests counting the commands a cycle sends do not count its SCRIPT LOADs.
func Preloaded(c *Client) <-chan struct{} { return c.preloaded }

// ErrReleased is the cause of a lock context cancelled by its release, for
// the black-box contract table.
var ErrReleased = errReleased

// InDoubt reports whether a call of c has failed without a reply from
// Redis, after which its waits run bounded for a while (Client.inDoubt).
func InDoubt(c *Client) bool { return c.connDoubt.Load() != 0 }

// ClientID is the random part of c's names in Redis (queue members, wait
// ids, its waiting registration), for tests that look for what a closed
// Client left behind.
func ClientID(c *Client) string { return c.id[:16] }

// ForceSubscribed reports whether c is subscribed to its key prefix's
// control channel, on which forced releases are told, and has checked the
// holds it had when the subscription was confirmed (controlLive).
func ForceSubscribed(c *Client) bool {
	return c.notify.isLive(c.forceChannel()) && c.catchingUp.Load() == 0
}

// WithWaitGroupObserved sets a function called each time a Wait of the
// Client has observed its generation, so tests know every Wait belongs to
// it. A field of the Client, not of the package: tests in parallel do not
// share it.
func WithWaitGroupObserved(f func()) Option {
	return func(c *config) { c.test.waitGroupObserved = f }
}

// WithSessionSending sets a function run before a renewal pipeline with a
// session batch is sent (testHooks.sessionSending), and
// WithReleaseAwaits one run when a Mutex release is about to wait for
// such a batch (testHooks.releaseAwaits).
func WithSessionSending(f func()) Option {
	return func(c *config) { c.test.sessionSending = f }
}

func WithReleaseAwaits(f func()) Option {
	return func(c *config) { c.test.releaseAwaits = f }
}

// WithFallbackPolled sets a function called each time a wait of the
// Client, subscribed to its channel, is woken by its fallback timer rather
// than by a message or a reconnect, with what the timer was set for
// (testHooks.fallbackPolled).
func WithFallbackPolled(f func(ch string, d time.Duration)) Option {
	return func(c *config) { c.test.fallbackPolled = f }
}

// WithWaitParked sets a function called when a wait of the Client,
// subscribed to its channel, starts (parked true) and stops (false)
// blocking between two looks: while it blocks, none of its looks is in
// flight, so the Client itself knows what Redis holds of the wait
// (testHooks.waitParked).
func WithWaitParked(f func(ch string, parked bool)) Option {
	return func(c *config) { c.test.waitParked = f }
}

// withRenewSizes sets the Client's renewal batch (holds a script call) and
// chunk (holds a pipeline), for tests of rounds sent in several pipelines.
func withRenewSizes(batch, chunk int) Option {
	return func(c *config) { c.test.renewBatch, c.test.renewChunk = batch, chunk }
}

// withRenewReplied sets a function that sees each of the Client's renewal
// replies just after it was applied (testHooks.renewReplied).
func withRenewReplied(f func(h *hold, ok bool, sentAt time.Time)) Option {
	return func(c *config) { c.test.renewReplied = f }
}

// CleanupTimeout is the budget of one background cleanup call.
const CleanupTimeout = cleanupTimeout

// WithMutexEvents sets a function that sees a Mutex's steps between its
// holders in the Client: "check" (a handoff through Redis that yields if
// another Client waits, subscribed), "cap" (one at the hard cap of local
// handoffs, which yields if another Client waits at all), "handoff" (one
// without a check), "yield" (the lock went back to Redis for the others)
// "holdback" (a local waiter holds back after a yield) and "taken" (it
// saw another Client take the lock, and ended its holdback).
func WithMutexEvents(f func(event string)) Option {
	return func(c *config) { c.test.mutexEvent = f }
}

// WithYieldWait sets how long at most the Client's next local waiter holds
// back after a Mutex yielded to other Clients (yieldWait).
func WithYieldWait(d time.Duration) Option {
	return func(c *config) { c.test.yieldWait = d }
}

// LocalWaitersIdle reports whether c's writer of the local waiters'
// counts (localWaiters.run) has ended: every write it was to make is made.
func LocalWaitersIdle(c *Client) bool {
	c.waits.mu.Lock()
	defer c.waits.mu.Unlock()
	return !c.waits.running
}

// WithSessionEvery sets how many renewal rounds apart a hold bound to the
// Client's renewal session is written (testHooks.sessionEvery); 0: the
// Client keeps no session and renews every hold every round.
func WithSessionEvery(n int) Option {
	return func(c *config) { c.test.sessionEvery = n }
}

// Cancelled is closed when Close has cancelled the Client's own context
// (c.ctx: its calls in progress have returned).
func Cancelled(c *Client) <-chan struct{} { return c.ctx.Done() }

// RenewRound runs a renewal round of c at once, on its renewal loop, and
// returns when it is done (false: c is closed).
func RenewRound(c *Client) bool {
	done := make(chan struct{})
	select {
	case c.renew.now <- done:
	case <-c.done:
		return false
	}
	<-done
	return true
}
