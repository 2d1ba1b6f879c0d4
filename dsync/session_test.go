package dsync_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The renewal session (session.go): a Mutex held for a renewal interval is
// bound to its Client's session key, the lock is free once that key is
// gone, and each safety condition of doc.go's paragraph on it holds.

// sessionLease is the tests' lease: rounds every 200 ms, a bound hold's
// own key written every 800 ms.
const sessionLease = 600 * time.Millisecond

var boundTo = regexp.MustCompile(` s([0-9]+)`)

// sessionOf waits until the Mutex key's value is bound to a session and
// returns the session's key.
func sessionOf(t *testing.T, rc rueidis.Client, prefix, key string) string {
	t.Helper()
	var sid string
	waitFor(t, 10*time.Second, "the hold bound to its Client's session", func() bool {
		v, _ := rc.Do(context.Background(), rc.B().Get().Key(key).Build()).ToString()
		if m := boundTo.FindStringSubmatch(v); m != nil {
			sid = m[1]
			return true
		}
		return false
	})
	return prefix + ":s:" + sid
}

func exists(t *testing.T, rc rueidis.Client, key string) bool {
	t.Helper()
	n, err := rc.Do(context.Background(), rc.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n == 1
}

// A bound hold whose session key is gone is free: another Client takes it
// at once, with a larger token; Inspect reports it free before that; its
// holder learns at its next round that its session is gone (the cause
// says so), and its next hold binds to a new session, never the old one.
func TestSessionGoneFreesBoundHolds(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	ctx := ctxT(t)
	lctx, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(lctx)
	sess := sessionOf(t, rc, prefix, prefix+":{m}:mutex")
	require.True(t, exists(t, rc, sess), "the session key %s", sess)

	// While the session lives the lock is held; its own key's TTL is the
	// backstop, 7/3 of the lease.
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(prefix+":{m}:mutex").Build()).AsInt64()
	require.NoError(t, err)
	assert.Greater(t, pttl, sessionLease.Milliseconds(), "the bound key's TTL")
	_, ok, err := b.NewMutex("m").TryLockContext(ctx)
	require.NoError(t, err)
	require.False(t, ok, "taken while its session lives")
	// Inspect shows the session's lease, not the backstop.
	st, err := b.Inspect(ctx, "m")
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Len(t, st[0].Holders, 1)
	assert.LessOrEqual(t, st[0].Holders[0].Lease, sessionLease, "the holder's lease Inspect shows")
	require.NoError(t, lctx.Err())

	// The session key goes (as when A is paused past its lease).
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(sess).Build()).Error())
	st, err = b.Inspect(ctx, "m")
	require.NoError(t, err)
	require.Len(t, st, 1)
	assert.Empty(t, st[0].Holders, "Inspect of a hold bound to a gone session: %+v", st[0])
	assert.Equal(t, tok, st[0].LastToken)
	lb, ok, err := b.NewMutex("m").TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "a hold bound to a gone session is free")
	tb, _ := dsync.FencingToken(lb)
	assert.Greater(t, tb, tok, "the token continues")

	// A learns at its next round (lease/3), by its session.
	select {
	case <-lctx.Done():
		assert.ErrorIs(t, context.Cause(lctx), dsync.ErrLockLost)
		assert.ErrorContains(t, context.Cause(lctx), "renewal session was found gone")
	case <-time.After(5 * sessionLease):
		t.Fatal("A's hold outlived its session by 5 leases")
	}

	// A new session, never the old one again.
	l2, err := a.NewMutex("m2").LockContext(ctx)
	require.NoError(t, err)
	sess2 := sessionOf(t, rc, prefix, prefix+":{m2}:mutex")
	assert.NotEqual(t, sess, sess2)
	assert.False(t, exists(t, rc, sess), "the old session key was made again")
	require.NoError(t, l2.Err())
}

// A bound hold whose key is removed behind dsync's back (a DEL: not a
// forced release, which is published) is lost within five rounds (its
// key is written every fifth round), with a renewal's cause.
func TestSessionBoundKeyDeletedLostWithinFiveRounds(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	ctx := ctxT(t)
	lctx, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	key := prefix + ":{m}:mutex"
	sess := sessionOf(t, rc, prefix, key)
	// Not before a's check of its holds when its control subscription
	// came up (controlLive), which would find the key gone first.
	waitFor(t, 10*time.Second, "a's control subscription", func() bool { return dsync.ForceSubscribed(a) })
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(key).Build()).Error())
	deleted := time.Now()
	select {
	case <-lctx.Done():
		took := time.Since(deleted)
		t.Logf("lost %v after the DEL", took)
		assert.ErrorContains(t, context.Cause(lctx), "a renewal found it gone")
		// Its session lives on: the loss is the key's own check.
		assert.True(t, exists(t, rc, sess))
	case <-time.After(10 * sessionLease):
		t.Fatal("the hold outlived its key by 10 leases")
	}
}

// A bound hold re-entered through another Client (the same owner) is
// shared: the re-entry unbinds it and never lowers its TTL; the first
// Client finds out at its next write and renews it every round; when the
// other Client releases, the first keeps the lock across more than three
// rounds (nothing expired), binds it again, and its release frees it.
func TestSessionReentryThroughAnotherClient(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	c := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease))
	ctx := dsync.WithOwner(ctxT(t))
	owner, _ := dsync.OwnerOf(ctx)
	key := prefix + ":{m}:mutex"
	la, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	sessionOf(t, rc, prefix, key)
	lb, err := b.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(v, owner+" "), v)
	assert.Contains(t, v, " 2", "re-entered: %q", v)
	assert.NotRegexp(t, boundTo, v, "a count above 1 is never bound")
	// The re-entry kept the backstop (A may not know yet that the hold is
	// shared): a TTL above the lease.
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	assert.Greater(t, pttl, sessionLease.Milliseconds(), "the TTL after the re-entry")
	// Both hold across rounds of both Clients (five of A's: one writes
	// A's hold and finds it shared).
	for range 5 {
		require.True(t, dsync.RenewRound(a))
		require.True(t, dsync.RenewRound(b))
	}
	require.NoError(t, la.Err())
	require.NoError(t, lb.Err())
	require.NoError(t, b.NewMutex("m").UnlockContext(lb))
	// A alone holds it now: across six rounds, while another
	// Client tries to take it (it must not: nothing expired).
	var taken atomic.Bool
	for end := time.Now().Add(2 * sessionLease); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, ok, err := c.NewMutex("m").TryLockContext(context.Background()); err == nil && ok {
			taken.Store(true)
			break
		}
	}
	require.False(t, taken.Load(), "another Client took the lock A still held")
	require.NoError(t, la.Err())
	sessionOf(t, rc, prefix, key) // bound again
	require.NoError(t, a.NewMutex("m").UnlockContext(la))
	_, ok, err := c.NewMutex("m").TryLockContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok, "free after the last release")
}

// heldRound is a lock held by one owner through Client A (bound to A's
// session) and re-entered through Client B, whose renewal round with a
// session batch is held just before its send until proceed is closed.
type heldRound struct {
	rc              rueidis.Client
	a, b, c         *dsync.Client
	ctx             context.Context
	prefix, key     string
	owner, aSess    string
	la, lb          context.Context
	proceed, awaits chan struct{}
	goOn            func() // closes proceed (once)
}

func newHeldRound(t *testing.T) *heldRound {
	t.Helper()
	x := &heldRound{prefix: testPrefix(t), rc: newRueidis(t), proceed: make(chan struct{}), awaits: make(chan struct{}, 1)}
	var arm atomic.Bool
	held := make(chan struct{})
	opts := []dsync.Option{dsync.WithKeyPrefix(x.prefix), dsync.WithLease(sessionLease)}
	x.a = newClientOn(t, newRueidis(t), opts...)
	x.b = newClientOn(t, newRueidis(t), append(opts,
		dsync.WithSessionSending(func() {
			if arm.CompareAndSwap(true, false) {
				close(held)
				<-x.proceed
			}
		}),
		dsync.WithReleaseAwaits(func() {
			select {
			case x.awaits <- struct{}{}:
			default:
			}
		}))...)
	x.c = newClientOn(t, newRueidis(t), opts...)
	// Registered after the Clients' Close, so run before it: a test that
	// fails with B's round held must not leave Close waiting for it.
	x.goOn = sync.OnceFunc(func() { close(x.proceed) })
	t.Cleanup(x.goOn)
	x.ctx = dsync.WithOwner(ctxT(t))
	x.owner, _ = dsync.OwnerOf(x.ctx)
	x.key = x.prefix + ":{m}:mutex"
	var err error
	x.la, err = x.a.NewMutex("m").LockContext(x.ctx)
	require.NoError(t, err)
	x.aSess = sessionOf(t, x.rc, x.prefix, x.key)
	x.lb, err = x.b.NewMutex("m").LockContext(x.ctx)
	require.NoError(t, err)
	// B makes its session (its first round) and renews its share through
	// it.
	for range 2 {
		require.True(t, dsync.RenewRound(x.b))
	}
	// B's next round with a session batch stops just before its send.
	arm.Store(true)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no round of B's with a session batch")
	}
	return x
}

// aKeeps checks that the lock's value is A's hold alone, not bound to
// another session than A's, and that A keeps it once B (closed here) has
// lost its session: C cannot take it.
func (x *heldRound) aKeeps(t *testing.T) {
	t.Helper()
	v, err := x.rc.Do(x.ctx, x.rc.B().Get().Key(x.key).Build()).ToString()
	require.NoError(t, err)
	f := strings.Fields(v)
	require.GreaterOrEqual(t, len(f), 3, "value %q", v)
	assert.Equal(t, []string{x.owner, "1"}, []string{f[0], f[2]}, "A's hold alone: %q", v)
	if m := boundTo.FindStringSubmatch(v); m != nil {
		require.Equal(t, x.aSess, x.prefix+":s:"+m[1], "A's hold bound to B's session: %q", v)
	}
	require.NoError(t, x.b.Close())
	// Once B's session has lapsed (A's alone left under the prefix), a
	// hold bound to it would be free: C must still not take the lock.
	waitFor(t, 10*time.Second, "B's session lapsed", func() bool {
		keys, err := x.rc.Do(x.ctx, x.rc.B().Keys().Pattern(x.prefix+":s:*").Build()).AsStrSlice()
		return err == nil && len(keys) == 1 && keys[0] == x.aSess
	})
	_, ok, err := x.c.NewMutex("m").TryLockContext(context.Background())
	require.NoError(t, err)
	require.False(t, ok, "another Client took the lock A still held")
	require.NoError(t, x.la.Err())
	require.NoError(t, x.a.NewMutex("m").UnlockContext(x.la))
}

// A renewal round's session batch sent before a release of a re-entry
// through its Client, but run in Redis after it, must not bind the hold
// left (the other Client's, its count back to 1) to that Client's session:
// the holder would lose it when that session lapsed. Made certain here: B's
// round is held just before its pipeline is sent, and B's release goes
// first; it must wait for the round's reply (before the fix it did not, and
// the batch bound A's hold to B's session).
func TestSessionBatchAfterReentryReleased(t *testing.T) {
	x := newHeldRound(t)
	unlocked := make(chan error, 1)
	go func() { unlocked <- x.b.NewMutex("m").UnlockContext(x.lb) }()
	waited := false
	select {
	case err := <-unlocked: // the release ran first in Redis
		require.NoError(t, err)
		unlocked <- nil
	case <-x.awaits:
		waited = true
	case <-time.After(10 * time.Second):
		t.Fatal("B's release neither returned nor waited for the round")
	}
	x.goOn()
	require.NoError(t, <-unlocked)
	require.True(t, dsync.RenewRound(x.b)) // after the held round
	x.aKeeps(t)
	assert.True(t, waited, "B's release did not wait for its round's session batch")
}

// Close with a renewal round in flight: the round's session batch runs in
// Redis before Close's releases (Close waits for the round), so it cannot
// bind the hold B's release leaves to B's session, which then lapses. B's
// round is held just before its send while Close begins. (This order
// passed before the fix too: a pipeline held until Close has cancelled the
// Client's context is not sent at all. What it guards is that Close, which
// now waits for the round, returns, and that A keeps its lock; the race it
// closes is a batch written before the cancel, run after the release.)
func TestSessionCloseWaitsForRound(t *testing.T) {
	x := newHeldRound(t)
	closed := make(chan error, 1)
	go func() { closed <- x.b.Close() }()
	// Close cancels B's context at once; the held round then goes on.
	select {
	case <-dsync.Cancelled(x.b):
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not cancel B's context")
	}
	x.goOn()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	x.aKeeps(t)
}

// An Observer's Lost function that releases another lock of the Client
// runs on the renewal loop, while it applies a round's replies: the
// release must not wait for that round (it waits only for the round's
// session batches to have their replies, see renewer.takeOff). Before
// that, the release waited for the whole round, which waited for it.
func TestSessionLostObserverReleases(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	var other atomic.Pointer[context.Context]
	var b *dsync.Client
	released := make(chan error, 1)
	obs := dsync.Observer{Lost: func(l dsync.Lost) {
		if p := other.Swap(nil); p != nil {
			released <- b.NewMutex("m2").UnlockContext(*p)
		}
	}}
	b = newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease), dsync.WithObserver(obs))
	ctx := ctxT(t)
	// A session first (a round with a hold to bind makes it).
	l0, err := b.NewMutex("m0").LockContext(ctx)
	require.NoError(t, err)
	sessionOf(t, rc, prefix, prefix+":{m0}:mutex")
	l1, err := b.NewMutex("m1").LockContext(ctx)
	require.NoError(t, err)
	l2, err := b.NewMutex("m2").LockContext(ctx)
	require.NoError(t, err)
	other.Store(&l2)
	// m1 deleted behind dsync's back: the next round that writes it finds
	// it gone, and its Lost releases m2.
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(prefix+":{m1}:mutex").Build()).Error())
	select {
	case err := <-released:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the release in Observer.Lost did not return: it waited for the round running it")
	}
	// (Lost runs before the lost hold's contexts are cancelled.)
	select {
	case <-l1.Done():
		require.ErrorIs(t, context.Cause(l1), dsync.ErrLockLost, "m1")
	case <-time.After(10 * time.Second):
		t.Fatal("m1's lock context not cancelled after its Lost")
	}
	require.Error(t, l2.Err(), "m2 released")
	v, err := rc.Do(ctx, rc.B().Get().Key(prefix+":{m2}:mutex").Build()).ToString()
	if !rueidis.IsRedisNil(err) {
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(v, "- "), "m2 still held in Redis: %q", v)
	}
	require.True(t, dsync.RenewRound(b), "the renewal loop goes on")
	require.NoError(t, l0.Err())
}

// A waiter of another Client marks a bound value " w" (after the
// binding): the holder's release publishes the wakeup, and the waiter is
// woken by it, not by its fallback poll.
func TestSessionBoundWaiterWoken(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	// A lease long enough that a fallback poll (lease/3) cannot be what
	// wakes the waiter within the test.
	lease := 30 * time.Second
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease))
	var polled atomic.Int64
	b := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(lease),
		dsync.WithFallbackPolled(func(string, time.Duration) { polled.Add(1) }))
	ctx := ctxT(t)
	key := prefix + ":{m}:mutex"
	la, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	// Bind it now (a round is lease/3 away).
	require.True(t, dsync.RenewRound(a))
	sessionOf(t, rc, prefix, key)
	got := make(chan error, 1)
	go func() {
		_, err := b.NewMutex("m").LockContext(ctx)
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter's mark", func() bool {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return strings.HasSuffix(v, " w") && boundTo.MatchString(v)
	})
	require.NoError(t, a.NewMutex("m").UnlockContext(la))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	assert.Zero(t, polled.Load(), "woken by its fallback poll, not the release's message")
}

// The tag of a bound hold (Observer.HoldTag) is renewed every round, as
// every hold's: it lives one lease from its last write, and a bound
// hold's own key is written only every fifth round. Polled over three
// leases: the holder's tag is never missing or expired.
func TestSessionBoundHoldKeepsItsTag(t *testing.T) {
	prefix := testPrefix(t)
	rc := newRueidis(t)
	obs := dsync.Observer{HoldTag: func(context.Context, dsync.AcquireDone) string { return "tag-x" }}
	a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(sessionLease), dsync.WithObserver(obs))
	ctx := ctxT(t)
	lctx, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	owner, _ := dsync.OwnerOf(lctx)
	key := prefix + ":{m}:mutex"
	sessionOf(t, rc, prefix, key)
	checks := 0
	for end := time.Now().Add(3 * sessionLease); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		f, err := rc.Do(ctx, rc.B().Hget().Key(key+":tags").Field(owner).Build()).ToString()
		require.NoError(t, err, "the holder's tag is gone")
		e, _, _ := strings.Cut(f, " ")
		exp, err := strconv.ParseInt(e, 10, 64)
		require.NoError(t, err, "tag field %q", f)
		tm, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, err1 := strconv.ParseInt(tm[0], 10, 64)
		us, err2 := strconv.ParseInt(tm[1], 10, 64)
		require.NoError(t, errors.Join(err1, err2))
		now := sec*1000 + us/1000 // server ms, as the tag's expiry
		require.Greater(t, exp, now, "the holder's tag %q expired (server ms %d)", f, now)
		checks++
	}
	require.Positive(t, checks)
	require.NoError(t, lctx.Err())
}
