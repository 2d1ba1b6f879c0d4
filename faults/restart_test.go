package faults

import (
	"context"
	"fmt"
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
	<-onceDone
	defer func() {
		addRow(reportRow{Leaked: -1, Scenario: "5 restart without persistence", Primitive: "Mutex, FairMutex, RWMutex (w, r), Semaphore, Once", Size: "1 holder each",
			Faults: fmt.Sprintf("SHUTDOWN NOSAVE, down %v", up.Sub(down).Round(time.Millisecond)), Ops: int64(len(hs)), Check: "all cancelled with ErrLockLost",
			RecoveryNote: fmt.Sprintf("cancelled ≤ %v after the server was back (bound %v)", worst.Round(time.Millisecond), bound),
			Command:      "cd faults && GOWORK=off go test -race -count=1 -run TestFaultServerRestartRenewalInterval .", Failed: t.Failed()})
	}()
	t.Logf("(g) SHUTDOWN NOSAVE + restart (down %v, lease %v): holders cancelled after the server answered again: %v; worst %v (bound lease/3 + 100ms = %v)",
		up.Sub(down).Round(time.Millisecond), lease, lines, worst.Round(time.Millisecond), bound)
}
