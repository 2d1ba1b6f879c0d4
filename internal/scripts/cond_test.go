package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/stretchr/testify/require"
)

// TestCondScripts drives the Cond scripts: Signal in arrival order, a
// signal given to a waiter that leaves passes on, a dead waiter at the head
// is skipped, one that dies signalled passes its signal on, Broadcast wakes
// all, and nothing is left.
func TestCondScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	keys := []string{"p:{c}:cond", "p:{c}:cond:places", "p:{c}:cond:sig"}
	exec := func(script string, args ...string) int64 {
		t.Helper()
		var n int64
		var err error
		switch script {
		case "wait":
			n, err = scripts.CondWait.Exec(ctx, rc, keys, args).AsInt64()
		case "check":
			n, err = scripts.CondCheck.Exec(ctx, rc, keys, args).AsInt64()
		case "leave":
			n, err = scripts.CondLeave.Exec(ctx, rc, keys, args).AsInt64()
		case "signal":
			n, err = scripts.CondSignal.Exec(ctx, rc, keys, args).AsInt64()
		}
		require.NoError(t, err)
		return n
	}
	check := func(w string) int64 { return exec("check", w, "10000") }
	for _, w := range []string{"a-1", "b-1", "c-1"} {
		exec("wait", w, "10000")
	}
	require.Equal(t, int64(1), exec("signal", "one"))
	require.Equal(t, []int64{1, 0, 0}, []int64{check("a-1"), check("b-1"), check("c-1")}, "Signal wakes the first")
	require.Equal(t, int64(1), check("a-1"), "a look does not take the signal")
	require.Equal(t, int64(1), exec("leave", "a-1", "1"), "a signalled waiter that gives up passes the signal on")
	require.Equal(t, []int64{1, 0}, []int64{check("b-1"), check("c-1")})
	require.Equal(t, int64(0), exec("leave", "b-1", "0"), "a woken waiter takes its signal")
	require.Equal(t, int64(0), check("c-1"))

	// A dead waiter (a 50 ms place that lapses) at the head is skipped.
	exec("leave", "c-1", "1")
	exec("wait", "dead-1", "50")
	exec("wait", "live-1", "10000")
	time.Sleep(80 * time.Millisecond) // the injected fault: the dead waiter stops renewing
	require.Equal(t, int64(1), exec("signal", "one"))
	require.Equal(t, int64(1), check("live-1"), "Signal skipped the dead waiter")
	exec("leave", "live-1", "0")

	// One that dies signalled passes its signal on when its place lapses.
	exec("wait", "dead-2", "50")
	exec("wait", "live-2", "10000")
	require.Equal(t, int64(1), exec("signal", "one"))
	require.Equal(t, int64(0), check("live-2"))
	time.Sleep(80 * time.Millisecond) // the injected fault
	require.Equal(t, int64(1), check("live-2"), "the dead waiter's signal passed on")
	exec("leave", "live-2", "0")

	for _, w := range []string{"x-1", "y-1", "z-1"} {
		exec("wait", w, "10000")
	}
	require.Equal(t, int64(3), exec("signal", "all"), "Broadcast")
	exec("wait", "late-1", "10000")
	for _, w := range []string{"x-1", "y-1", "z-1"} {
		require.Equal(t, int64(1), check(w))
		exec("leave", w, "0")
	}
	require.Equal(t, int64(0), check("late-1"), "Broadcast wakes only those waiting when it ran")
	require.Equal(t, int64(2), check("gone-1"), "a waiter that is not registered")
	exec("leave", "late-1", "1")
	n, err := rc.Do(ctx, rc.B().Exists().Key(keys...).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "keys left")
}
