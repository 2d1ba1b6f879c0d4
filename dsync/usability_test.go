package dsync_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A zero-value primitive panics with a message that says what to do,
// not with a nil pointer dereference.
func TestZeroValuePanicsClearly(t *testing.T) {
	ctx := context.Background()
	for name, call := range map[string]func(){
		"Mutex.LockContext":   func() { var m dsync.Mutex; m.LockContext(ctx) },
		"Mutex.UnlockContext": func() { var m dsync.Mutex; m.UnlockContext(ctx) },
		"FairMutex.Lock":      func() { var m dsync.FairMutex; m.Lock() },
		"RWMutex.RLock":       func() { var m dsync.RWMutex; m.RLock() },
		"Semaphore.Acquire":   func() { var s dsync.Semaphore; s.Acquire(ctx, 1) },
		"Once.Do":             func() { var o dsync.Once; o.Do(ctx, func(context.Context) error { return nil }) },
		"WaitGroup.Wait":      func() { var w dsync.WaitGroup; w.Wait(ctx) },
	} {
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				assert.Contains(t, msg, "zero-value", "%s on a zero value: panic %v, want a message naming the zero value", name, r)
			}()
			call()
		}()
	}
}

// The lock context of a fixed lease (WithLeaseTime) has a Deadline at the
// lease end, so work scoped to it can inherit it; a watchdog lock has none.
func TestFixedLeaseLockContextDeadline(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	const lease = 2 * time.Second
	start := time.Now()
	l, err := c.NewMutex("dl", dsync.WithLeaseTime(lease)).LockContext(context.Background())
	require.NoError(t, err)
	d, ok := l.Deadline()
	require.True(t, ok, "fixed-lease lock context deadline %v (ok %v), want within (%v, %v] after the call", d.Sub(start), ok, lease-100*time.Millisecond, lease)
	require.False(t, d.Before(start.Add(lease-100*time.Millisecond)), "fixed-lease lock context deadline %v (ok %v), want within (%v, %v] after the call", d.Sub(start), ok, lease-100*time.Millisecond, lease)
	require.False(t, d.After(start.Add(lease)), "fixed-lease lock context deadline %v (ok %v), want within (%v, %v] after the call", d.Sub(start), ok, lease-100*time.Millisecond, lease)
	// A sooner deadline of the caller's stays.
	soon, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	l2, err := c.NewFairMutex("dl2", dsync.WithLeaseTime(lease)).LockContext(soon)
	require.NoError(t, err)
	d2, _ := l2.Deadline()
	require.False(t, d2.After(time.Now().Add(500*time.Millisecond)), "deadline %v is past the caller's sooner one", time.Until(d2))
	w, err := c.NewMutex("dl3").LockContext(context.Background())
	require.NoError(t, err)
	_, ok = w.Deadline()
	require.False(t, ok, "a watchdog lock context has a deadline")
	for _, x := range []struct {
		l context.Context
		m interface{ UnlockContext(context.Context) error }
	}{{l, c.NewMutex("dl")}, {l2, c.NewFairMutex("dl2")}, {w, c.NewMutex("dl3")}} {
		require.NoError(t, x.m.UnlockContext(x.l))
	}
}

// Owners say who made them: "<client name>/<random>", the name from
// WithClientName (made safe for the scripts) or "<host>:<pid>"; Inspect
// shows it, so a holder can be traced to its process.
func TestClientNameInOwners(t *testing.T) {
	c := newClient(t, dsync.WithClientName("worker 7/a{b}"))
	ctx := ctxT(t)
	l, err := c.NewMutex("named").LockContext(ctx)
	require.NoError(t, err)
	owner, _ := dsync.OwnerOf(l)
	require.True(t, strings.HasPrefix(owner, "worker_7_a_b_/"), "owner %q, want worker_7_a_b_/ and 32 hex digits", owner)
	require.Equal(t, len("worker_7_a_b_/")+32, len(owner), "owner %q, want worker_7_a_b_/ and 32 hex digits", owner)
	st := inspectKind(t, c, "named", dsync.KindMutex)
	require.Len(t, st.Holders, 1, "Inspect holders %+v", st.Holders)
	require.Equal(t, owner, st.Holders[0].Owner, "Inspect holders %+v", st.Holders)
	host, _ := os.Hostname()
	want := host + ":" + strconv.Itoa(os.Getpid()) + "/"
	o, _ := dsync.OwnerOf(dsync.WithOwner(ctx))
	require.True(t, strings.HasPrefix(o, want), "WithOwner owner %q, want the prefix %q", o, want)
	l2, err := newClient(t).NewMutex("unnamed").LockContext(ctx)
	require.NoError(t, err)
	o, _ = dsync.OwnerOf(l2)
	require.True(t, strings.HasPrefix(o, want), "default Client's owner %q, want the prefix %q", o, want)
	require.NoError(t, c.NewMutex("named").UnlockContext(l))
}
