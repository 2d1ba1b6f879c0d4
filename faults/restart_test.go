package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
)

// The bound of the reliability issue for a restart without persistence:
// holders of every kind (Mutex, FairMutex, RWMutex writer and reader,
// Semaphore, a Once's run) learn at their next renewal that their keys are
// gone: each lock context is cancelled with ErrLockLost within one renewal
// interval (lease/3, + 100 ms of slack) of the empty server answering again.
func TestFaultServerRestartRenewalInterval(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	const lease = 3 * time.Second // a restart takes well under lease/3
	c := newDsync(t, srv.Addr, prefix, lease)
	ctx := context.Background()
	type held struct {
		what string
		lctx context.Context
	}
	var hs []held
	add := func(what string, lctx context.Context, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		hs = append(hs, held{what, lctx})
	}
	l, err := c.NewMutex("m").LockContext(ctx)
	add("Mutex", l, err)
	l, err = c.NewFairMutex("f").LockContext(ctx)
	add("FairMutex", l, err)
	l, err = c.NewRWMutex("w").LockContext(ctx)
	add("RWMutex writer", l, err)
	l, err = c.NewRWMutex("r").RLockContext(ctx)
	add("RWMutex reader", l, err)
	l, err = c.NewSemaphore("s", 3).Acquire(ctx, 2)
	add("Semaphore", l, err)
	onceRun := make(chan context.Context)
	onceDone := make(chan error, 1)
	go func() {
		onceDone <- c.NewOnce("o").Do(ctx, func(fctx context.Context) error {
			onceRun <- fctx
			<-fctx.Done()
			return fctx.Err()
		})
	}()
	hs = append(hs, held{"Once run", <-onceRun})
	prims := []string{"Mutex", "FairMutex", "RWMutex (w, r)", "Semaphore", "Once"}
	// Election: the leader's term (a lock context), and an observer on
	// another Client, which must see the end (Leader{}).
	c2 := newDsync(t, srv.Addr, prefix, lease)
	term, err := c.NewElection("e").Campaign(ctx, "leader")
	add("Election term", term, err)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := c2.NewElection("e").Observe(octx)
	for l := range obs {
		if l.Value == "leader" {
			break
		}
	}
	observerEnd := make(chan time.Time, 1)
	go func() {
		for l := range obs {
			if l.Term == 0 {
				observerEnd <- time.Now()
				return
			}
		}
	}()
	prims = append(prims, "Election (term, observer)")
	// Group: a run in progress (fn's lock context) and a caller of the
	// same key in another Client waiting for it, which must not hang.
	groupRun := make(chan context.Context)
	groupDone := make(chan error, 1)
	go func() {
		_, _, err := dsync.NewGroup[string](c, "g").Do(ctx, "k", func(fctx context.Context) (string, error) {
			groupRun <- fctx
			<-fctx.Done()
			return "", context.Cause(fctx)
		})
		groupDone <- err
	}()
	hs = append(hs, held{"Group run", <-groupRun})
	type result struct {
		at  time.Time
		err error
		v   string
	}
	joiner := make(chan result, 1)
	go func() {
		v, _, err := dsync.NewGroup[string](c2, "g").Do(ctx, "k", func(context.Context) (string, error) { return "joiner ran", nil })
		joiner <- result{time.Now(), err, v}
	}()
	waitFor(t, 5*time.Second, "the Group caller waiting for the run", func() bool {
		sts, err := c.Inspect(ctx, "g")
		return err == nil && len(sts) == 1 && len(sts[0].Waiters) > 0
	})
	prims = append(prims, "Group (run, waiting caller)")
	// Cond: a waiter on c (it released the Mutex), then a holder of the
	// Cond's Mutex on c2. The waiter must not hang (see below).
	cm := c.NewMutex("cm")
	lctx, err := cm.LockContext(ctx)
	if err != nil {
		t.Fatalf("Cond's Mutex: %v", err)
	}
	waiter := make(chan result, 1)
	go func() {
		nctx, err := c.NewCond(cm).Wait(lctx)
		if err == nil {
			_ = cm.UnlockContext(nctx)
		}
		waiter <- result{at: time.Now(), err: err}
	}()
	waitFor(t, 5*time.Second, "the Cond waiter registered", func() bool {
		sts, err := c.Inspect(ctx, "cm")
		for _, st := range sts {
			if st.Kind == dsync.KindCond && len(st.Waiters) > 0 {
				return err == nil
			}
		}
		return false
	})
	l, err = c2.NewMutex("cm").LockContext(ctx)
	add("Cond's Mutex holder", l, err)
	prims = append(prims, "Cond (holder, waiter)")
	cancelled := make([]chan time.Time, len(hs))
	for i, h := range hs {
		ch := make(chan time.Time, 1)
		cancelled[i] = ch
		context.AfterFunc(h.lctx, func() { ch <- time.Now() })
	}
	srv.shutdownNoSave(t)
	down := time.Now()
	srv.restart(t)
	up := time.Now()
	bound := lease/3 + 100*time.Millisecond
	worst := time.Duration(0)
	var lines []string
	for i, h := range hs {
		select {
		case at := <-cancelled[i]:
			took := at.Sub(up)
			worst = max(worst, took)
			lines = append(lines, fmt.Sprintf("%s %v", h.what, took.Round(time.Millisecond)))
			assert.ErrorIs(t, context.Cause(h.lctx), dsync.ErrLockLost, "%s: the cause", h.what)
			assert.LessOrEqual(t, took, bound, "%s cancelled after the server was back; want within one renewal interval", h.what)
		case <-time.After(2 * lease):
			t.Errorf("%s not cancelled within 2 leases of the restart", h.what)
		}
	}
	// The others: the observer sees the end, the waiting Group caller and
	// the Cond waiter return; each within the same bound.
	others := 0
	var outcomes []string
	other := func(what string, ch <-chan result, check func(result)) {
		t.Helper()
		select {
		case r := <-ch:
			took := r.at.Sub(up)
			worst = max(worst, took)
			others++
			lines = append(lines, fmt.Sprintf("%s %v (%v)", what, took.Round(time.Millisecond), r.err))
			check(r)
			assert.LessOrEqual(t, took, bound, "%s after the server was back; want within one renewal interval", what)
		case <-time.After(2 * lease):
			t.Errorf("%s: nothing within 2 leases of the restart", what)
		}
	}
	obsCh := make(chan result, 1)
	go func() {
		select {
		case at := <-observerEnd:
			obsCh <- result{at: at}
		case <-time.After(3 * lease):
		}
	}()
	other("Election observer saw no leader", obsCh, func(result) {})
	other("Group waiting caller returned", joiner, func(r result) {
		// The run it waited for is gone: it runs fn itself (as after
		// Forget or a lapsed lease). If its look met the server down (the
		// pub/sub break makes it look at once), the wait ends with that
		// Redis error.
		outcomes = append(outcomes, "Group caller: "+outcome(r.err, "ran fn"))
		assert.True(t, r.err == nil && r.v == "joiner ran" || connErr(r.err),
			"the waiting Group caller returned %q, %v: want fn run by it, or the Redis error of its look", r.v, r.err)
	})
	other("Cond waiter returned", waiter, func(r result) {
		// Its place gone, it wakes as if signalled (cond_check.lua) and
		// returns holding the lock; if its look met the server down (the
		// pub/sub break makes it look at once), the wait ends with that
		// Redis error, as every wait's attempt does (engine.go waitErr),
		// and the lock is not held. Never a context's error: no hang.
		outcomes = append(outcomes, "Cond waiter: "+outcome(r.err, "woken, holding the lock"))
		assert.True(t, r.err == nil || connErr(r.err), "the Cond waiter returned %v: want nil (woken as if signalled) or the Redis error of its look", r.err)
	})
	t.Logf("Group run's Do returned %v", <-groupDone)
	<-onceDone
	defer func() {
		addRow(reportRow{Leaked: -1, Scenario: "5 restart without persistence", Primitive: strings.Join(prims, ", "), Size: "1 holder each; an Election observer, a waiting Group caller and a Cond waiter",
			Faults: fmt.Sprintf("SHUTDOWN NOSAVE, down %v", up.Sub(down).Round(time.Millisecond)), Ops: int64(len(hs) + others), Check: fmt.Sprintf("%d holds cancelled with ErrLockLost; the Election observer saw no leader; %s", len(hs), strings.Join(outcomes, ", ")),
			RecoveryNote: fmt.Sprintf("cancelled ≤ %v after the server was back (bound %v)", worst.Round(time.Millisecond), bound),
			Command:      "cd faults && GOWORK=off go test -race -count=1 -run TestFaultServerRestartRenewalInterval .", Failed: t.Failed()})
	}()
	t.Logf("(g) SHUTDOWN NOSAVE + restart (down %v, lease %v): holders cancelled after the server answered again: %v; worst %v (bound lease/3 + 100ms = %v)",
		up.Sub(down).Round(time.Millisecond), lease, lines, worst.Round(time.Millisecond), bound)
}

// outcome names how a wait ended: ok if err is nil, else the Redis error
// of a look that met the server down.
func outcome(err error, ok string) string {
	if err == nil {
		return ok
	}
	if connErr(err) {
		return "the Redis error of its look during the restart"
	}
	return err.Error()
}

// connErr reports whether err is the error of a connection to a server
// that is down (refused, or closed under the call).
func connErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
