package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The commands every primitive needs: the handshake, the scripts and what
// they call (internal/scripts/*.lua), MGET (WaitGroup.Wait), SCAN (List),
// WAIT (replica acknowledgement), pub/sub for wakeups.
const dsyncAllCommands = "+@connection +client +evalsha +eval +script|load +info " +
	"+get +set +mget +del +exists +incrby +persist +pexpire +pexpireat +pttl +time +scan +wait " +
	"+hdel +hexists +hget +hgetall +hincrby +hkeys +hmget +hset +hvals " +
	"+lindex +llen +lpop +lpush +lrange +lrem +ltrim +rpop +rpush +sadd +sismember +srem " +
	"+zadd +zcard +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +zunionstore " +
	"+publish +pubsub +subscribe +unsubscribe"

// Security: a user restricted to the prefix's keys (~dsync:*) and channels
// (&dsync:*) runs every primitive, with contention so that waiters are
// woken over pub/sub and holds are renewed, then Inspect and List; a user
// without access to them gets NOPERM, naming the primitive, from each.
func TestFaultSecurityACLAllPrimitives(t *testing.T) {
	srv := startRedis(t)
	for _, u := range []string{
		"ACL SETUSER locker on >lockpw resetkeys ~dsync:* resetchannels &dsync:* -@all " + dsyncAllCommands,
		"ACL SETUSER outsider on >outpw resetkeys ~other:* resetchannels &other:* -@all " + dsyncAllCommands,
	} {
		require.NoError(t, srv.do(t, strings.Fields(u)...).Error(), u)
	}
	as := func(user, pw string) func(*rueidis.ClientOption) {
		return func(o *rueidis.ClientOption) { o.Username, o.Password = user, pw }
	}
	const lease = time.Second
	c1 := newDsync(t, srv.Addr, "dsync", lease, as("locker", "lockpw"))
	c2 := newDsync(t, srv.Addr, "dsync", lease, as("locker", "lockpw"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		require.NoError(t, err, "restricted user, %s", what)
	}
	// waiters is how many waiters Inspect shows for the kind's lock name.
	waiters := func(kind dsync.Kind, name string) int {
		t.Helper()
		sts, err := c1.Inspect(ctx, name)
		must("Inspect "+name, err)
		for _, st := range sts {
			if st.Kind == kind {
				return len(st.Waiters)
			}
		}
		return 0
	}
	// renewed waits (two leases at most) until Redis shows name's holds
	// renewed, or its waiters' places if nothing holds it: the latest
	// expiry that Inspect shows moves on, which between renewals it does
	// not. So a renewal refused to the restricted user fails here (a
	// wait of half a lease, as before, would not have seen it: the hold
	// outlives that unrenewed).
	renewed := func(what, name string) {
		t.Helper()
		left := func() time.Duration {
			sts, err := c1.Inspect(ctx, name)
			must("Inspect "+name, err)
			var held, placed time.Duration
			for _, st := range sts {
				for _, h := range st.Holders {
					held = max(held, h.Lease)
				}
				for _, w := range st.Waiters {
					placed = max(placed, w.Place)
				}
			}
			if held > 0 {
				return held
			}
			return placed
		}
		// By the expiry it gives (the reply's arrival plus the time left,
		// late by up to a round trip): it moves on by a renewal's interval
		// (lease/3) with each renewal, and stays put without one. (Time
		// left against time left, compared until 2026-12-04, needed a
		// later look to come as soon after a renewal as the first: with
		// both CPUs busy, looks 50 ms apart, none did in 2 s.)
		expiry := func() time.Time {
			if l := left(); l > 0 {
				return time.Now().Add(l)
			}
			return time.Time{} // nothing left: not renewed
		}
		e0 := expiry()
		waitFor(t, 2*lease, what+": a renewal seen in Redis", func() bool { return expiry().After(e0.Add(lease / 4)) })
	}
	// contend holds with first, has second wait (woken over pub/sub),
	// keeps the hold across a renewal of name (none: no hold to renew),
	// releases, and expects the waiter in.
	var prims []string // the primitives that ran, for the row
	contend := func(what, name string, first func() (func() error, error), second func() (func() error, error)) {
		t.Helper()
		rel1, err := first()
		must(what+": first acquire", err)
		got := make(chan error, 1)
		go func() {
			rel2, err := second()
			if err == nil {
				err = rel2()
			}
			got <- err
		}()
		waitFor(t, 5*time.Second, what+": the waiter subscribed", func() bool {
			chans, _ := srv.do(t, "PUBSUB", "CHANNELS", "dsync:{*").AsStrSlice() // a lock's channel
			return len(chans) > 0
		})
		if name != "" {
			renewed(what, name) // the fault: hold across a renewal while the other waits
		}
		must(what+": release", rel1())
		select {
		case err := <-got:
			must(what+": waiter", err)
			prims = append(prims, what)
		case <-time.After(5 * time.Second):
			t.Fatalf("restricted user, %s: the waiter was never woken", what)
		}
	}
	lockers := func(l1, l2 dsync.ContextLocker) (func() (func() error, error), func() (func() error, error)) {
		f := func(l dsync.ContextLocker) func() (func() error, error) {
			return func() (func() error, error) {
				lctx, err := l.LockContext(ctx)
				return func() error {
					if lctx.Err() != nil {
						return context.Cause(lctx)
					}
					return l.UnlockContext(lctx)
				}, err
			}
		}
		return f(l1), f(l2)
	}
	a, b := lockers(c1.NewMutex("m"), c2.NewMutex("m"))
	contend("Mutex", "m", a, b)
	a, b = lockers(c1.NewFairMutex("f"), c2.NewFairMutex("f"))
	contend("FairMutex", "f", a, b)
	a, b = lockers(c1.NewMultiLock([]string{"m1", "m2"}), c2.NewMultiLock([]string{"m2", "m1"}))
	contend("MultiLock", "m1", a, b)
	rw1, rw2 := c1.NewRWMutex("rw"), c2.NewRWMutex("rw")
	contend("RWMutex", "rw",
		func() (func() error, error) {
			lctx, err := rw1.RLockContext(ctx)
			return func() error { return rw1.RUnlockContext(lctx) }, err
		},
		func() (func() error, error) {
			lctx, err := rw2.LockContext(ctx)
			return func() error { return rw2.UnlockContext(lctx) }, err
		})
	s1, s2 := c1.NewSemaphore("s", 2), c2.NewSemaphore("s", 2)
	contend("Semaphore", "s",
		func() (func() error, error) {
			lctx, err := s1.Acquire(ctx, 2)
			return func() error { return s1.Release(lctx, 2) }, err
		},
		func() (func() error, error) {
			lctx, err := s2.Acquire(ctx, 1)
			return func() error { return s2.Release(lctx, 1) }, err
		})
	// Once: one Do runs f while the other waits; the waiter returns nil
	// without running f.
	release := make(chan struct{})
	ran := 0
	contend("Once", "o",
		func() (func() error, error) {
			started := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- c1.NewOnce("o").Do(ctx, func(context.Context) error { ran++; close(started); <-release; return nil })
			}()
			<-started
			return func() error { close(release); return <-done }, nil
		},
		func() (func() error, error) {
			err := c2.NewOnce("o").Do(ctx, func(context.Context) error { ran++; return nil })
			return func() error { return nil }, err
		})
	assert.Equal(t, 1, ran, "restricted user: times Once ran f")
	v1, err := dsync.OnceValue(c1, "ov", func(context.Context) (string, error) { return "first", nil })(ctx)
	must("OnceValue", err)
	v2, err := dsync.OnceValue(c2, "ov", func(context.Context) (string, error) { return "second", nil })(ctx)
	must("OnceValue", err)
	assert.Equal(t, []string{"first", "first"}, []string{v1, v2}, "restricted user: the OnceValue results")
	prims = append(prims, "OnceValue")
	wg1, wg2 := c1.NewWaitGroup("wg"), c2.NewWaitGroup("wg")
	contend("WaitGroup", "",
		func() (func() error, error) {
			return func() error { return wg1.Done(ctx) }, wg1.Add(ctx, 1)
		},
		func() (func() error, error) {
			return func() error { return nil }, wg2.Wait(ctx)
		})
	// Election: c1 campaigns and leads; an observer on c2 sees it; a
	// second candidate on c2 waits in line (woken over pub/sub) across a
	// renewal of the term; c1 resigns; c2 takes over, and the observer and
	// Leader see it.
	el1, el2 := c1.NewElection("el"), c2.NewElection("el")
	term1, err := el1.Campaign(ctx, "one")
	must("Election.Campaign", err)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := el2.Observe(octx)
	seen := func(value string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case l, ok := <-obs:
				require.True(t, ok, "restricted user, Election: Observe closed before it saw %q", value)
				if l.Value == value {
					return
				}
			case <-timeout:
				t.Fatalf("restricted user, Election: the observer never saw %q", value)
			}
		}
	}
	seen("one")
	took := make(chan error, 1)
	var term2 context.Context
	go func() {
		var err error
		term2, err = el2.Campaign(ctx, "two")
		took <- err
	}()
	waitFor(t, 5*time.Second, "Election: the second candidate in line", func() bool { return waiters(dsync.KindElection, "el") > 0 })
	renewed("Election", "el") // the term renewed while the candidate waits
	must("Election: term 1 across a renewal", term1.Err())
	must("Election.Resign", el1.Resign(term1))
	select {
	case err := <-took:
		must("Election: the second candidate", err)
	case <-time.After(5 * time.Second):
		t.Fatal("restricted user, Election: the second candidate never took over")
	}
	seen("two")
	ldr, err := el1.Leader(ctx)
	must("Election.Leader", err)
	assert.Equal(t, "two", ldr.Value, "restricted user: Election.Leader after the takeover")
	assert.Greater(t, tokenOf(term2), tokenOf(term1), "restricted user: the second term above the first")
	ocancel()
	prims = append(prims, "Election")
	// Group: a Do on c1 runs fn; a Do of the same key on c2 joins the
	// flight (it waits in Redis, woken over pub/sub) and gets its result
	// without running fn; Forget drops the key.
	g1, g2 := dsync.NewGroup[string](c1, "g"), dsync.NewGroup[string](c2, "g")
	gRelease, gStarted := make(chan struct{}), make(chan struct{})
	gRan := 0
	type gres struct {
		v      string
		shared bool
		err    error
	}
	gLeader, gJoiner := make(chan gres, 1), make(chan gres, 1)
	go func() {
		v, shared, err := g1.Do(ctx, "k", func(context.Context) (string, error) {
			gRan++
			close(gStarted)
			<-gRelease
			return "flight", nil
		})
		gLeader <- gres{v, shared, err}
	}()
	<-gStarted
	go func() {
		v, shared, err := g2.Do(ctx, "k", func(context.Context) (string, error) { gRan++; return "own", nil })
		gJoiner <- gres{v, shared, err}
	}()
	waitFor(t, 5*time.Second, "Group: the second caller waiting for the flight", func() bool { return waiters(dsync.KindGroup, "g") > 0 })
	renewed("Group", "g") // the run renewed while the other caller waits
	close(gRelease)
	for _, ch := range []chan gres{gLeader, gJoiner} {
		select {
		case r := <-ch:
			must("Group.Do", r.err)
			assert.Equal(t, "flight", r.v, "restricted user: Group.Do's result")
		case <-time.After(5 * time.Second):
			t.Fatal("restricted user, Group: a caller never got the flight's result")
		}
	}
	assert.Equal(t, 1, gRan, "restricted user: times Group ran fn for one flight")
	must("Group.Forget", g2.Forget(ctx, "k"))
	prims = append(prims, "Group")
	// Cond: a waiter on c1 and one on c2 (each Waits with the Mutex held);
	// Signal from c2 wakes one, Broadcast from c1 the other; each returns
	// holding the lock.
	cm1, cm2 := c1.NewMutex("cm"), c2.NewMutex("cm")
	cd1, cd2 := c1.NewCond(cm1), c2.NewCond(cm2)
	woke := make(chan error, 2)
	for i, p := range []struct {
		m  *dsync.Mutex
		cd *dsync.Cond
	}{{cm1, cd1}, {cm2, cd2}} {
		lctx, err := p.m.LockContext(ctx)
		must("Cond: lock", err)
		go func() {
			nctx, err := p.cd.Wait(lctx)
			if err == nil {
				err = p.m.UnlockContext(nctx)
			}
			woke <- err
		}()
		waitFor(t, 5*time.Second, "Cond: the waiter registered", func() bool {
			select {
			case err := <-woke: // it failed (NOPERM) or woke unsignalled
				t.Fatalf("restricted user, Cond: Wait returned before any signal: %v", err)
			default:
			}
			return waiters(dsync.KindCond, "cm") == i+1
		})
	}
	renewed("Cond", "cm") // the waiters renew their places
	awake := func(what string) {
		t.Helper()
		select {
		case err := <-woke:
			must(what, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("restricted user, %s: no waiter woke", what)
		}
	}
	must("Cond.Signal", cd2.Signal(ctx))
	awake("Cond: after Signal")
	select {
	case err := <-woke:
		t.Fatalf("restricted user, Cond: a Signal woke two waiters (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	must("Cond.Broadcast", cd1.Broadcast(ctx))
	awake("Cond: after Broadcast")
	prims = append(prims, "Cond")
	// Inspect and List see every primitive (a WaitGroup at zero has no
	// key: raise it for the look).
	must("WaitGroup.Add", wg1.Add(ctx, 1))
	kinds := map[dsync.Kind]bool{}
	for _, n := range []string{"m", "f", "m1", "rw", "s", "o", "ov", "wg", "el", "g", "cm"} {
		sts, err := c1.Inspect(ctx, n)
		must("Inspect "+n, err)
		for _, st := range sts {
			kinds[st.Kind] = true
		}
	}
	refs, err := c1.List(ctx, "*")
	must("List", err)
	prims = append(prims, "Inspect", "List")
	var names []string
	for _, r := range refs {
		names = append(names, string(r.Kind)+" "+r.Name)
	}
	must("WaitGroup.Done", wg1.Done(ctx))
	t.Logf("(j) ACL ~dsync:* &dsync:*, %d commands: %s ran with contention, wakeups and renewals; Inspect saw kinds %v; List saw %v",
		len(strings.Fields(dsyncAllCommands)), strings.Join(prims, ", "), kinds, names)
	for _, k := range []dsync.Kind{dsync.KindMutex, dsync.KindFairMutex, dsync.KindRWMutex, dsync.KindSemaphore, dsync.KindOnce, dsync.KindWaitGroup, dsync.KindElection} {
		if k != dsync.KindMutex && k != dsync.KindFairMutex { // free locks may have expired
			assert.True(t, kinds[k], "Inspect did not report a %s", k)
		}
	}
	for _, want := range []string{"rw_mutex rw", "semaphore s", "once o", "once ov", "wait_group wg"} {
		assert.Contains(t, names, want, "List as the restricted user")
	}
	// The outsider: NOPERM from every primitive, naming it.
	c3 := newDsync(t, srv.Addr, "dsync", lease, as("outsider", "outpw"))
	octx, ocancel = context.WithTimeout(ctx, 5*time.Second)
	defer ocancel()
	checks := map[string]error{}
	_, checks["Mutex"] = c3.NewMutex("m").LockContext(octx)
	_, checks["FairMutex"] = c3.NewFairMutex("f").LockContext(octx)
	_, checks["RWMutex"] = c3.NewRWMutex("rw").RLockContext(octx)
	_, checks["Semaphore"] = c3.NewSemaphore("s", 2).Acquire(octx, 1)
	checks["Once"] = c3.NewOnce("o2").Do(octx, func(context.Context) error { return nil })
	_, checks["OnceValue"] = dsync.OnceValue(c3, "ov2", func(context.Context) (int, error) { return 1, nil })(octx)
	checks["WaitGroup"] = c3.NewWaitGroup("wg").Add(octx, 1)
	_, checks["MultiLock"] = c3.NewMultiLock([]string{"m1", "m2"}).LockContext(octx)
	_, checks["Election"] = c3.NewElection("el").Campaign(octx, "x")
	_, checks["Election.Leader"] = c3.NewElection("el").Leader(octx)
	_, _, checks["Group"] = dsync.NewGroup[string](c3, "g").Do(octx, "k", func(context.Context) (string, error) { return "", nil })
	checks["Cond"] = c3.NewCond(c3.NewMutex("cm")).Broadcast(octx)
	_, checks["Inspect"] = c3.Inspect(octx, "m")
	for what, err := range checks {
		if assert.Error(t, err, "outsider's %s", what) {
			assert.Contains(t, err.Error(), "NOPERM", "outsider's %s", what)
		}
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "outsider's %s waited out its context instead of failing", what)
	}
	addRow(reportRow{Scenario: "j security: ACL", Primitive: strings.Join(prims, ", "),
		Size:   fmt.Sprintf("a user limited to ~dsync:* &dsync:* and %d commands; an outsider", len(strings.Fields(dsyncAllCommands))),
		Faults: "another user's keys and channels", NoCounts: true, Leaked: -1, RecoveryNote: "—", Failed: t.Failed(),
		Check:   fmt.Sprintf("the restricted user ran every primitive with contention, wakeups and renewals (Inspect saw %d kinds, List %d names); the outsider got NOPERM naming the primitive from %d calls", len(kinds), len(names), len(checks)),
		Command: "cd faults && GOWORK=off go test -race -count=1 -run TestFaultSecurityACLAllPrimitives ."})
}

// The ACL list names every command a script calls: a script that starts
// calling a new one fails here, not only for a restricted user at run time.
func TestACLListCoversScripts(t *testing.T) {
	files, err := filepath.Glob("../internal/scripts/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	allowed := map[string]bool{}
	for _, f := range strings.Fields(dsyncAllCommands) {
		allowed[strings.TrimPrefix(f, "+")] = true
	}
	call := regexp.MustCompile(`redis\.call\('(\w+)'`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			assert.True(t, allowed[strings.ToLower(m[1])], "%s calls %s, which dsyncAllCommands does not allow", filepath.Base(f), m[1])
		}
	}
}
