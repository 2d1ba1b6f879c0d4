package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// checkRun asserts the example's story: worker-2 took the lock after
// worker-1 with a larger token, and the database refused worker-1's late
// write, so the row and its history are worker-2's alone.
func checkRun(t *testing.T) {
	t.Helper()
	var out strings.Builder
	res, err := run(&out)
	require.NoError(t, err, out.String())
	require.NotZero(t, res.Token1, out.String())
	require.Greater(t, res.Token2, res.Token1, out.String())
	require.True(t, res.Refused, "worker-1's late write was not refused:\n%s", out.String())
	require.Equal(t, "shipped by worker-2", res.Status)
	require.Equal(t, res.Token2, res.Fence)
	require.Len(t, res.History, 1, "history: %q", res.History)
	require.Contains(t, res.History[0], "worker-2")
	require.Contains(t, out.String(), "worker-1: refused (0 rows)")
}

// The README's command: no Redis, no database installed.
func TestFenced(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	checkRun(t)
}

func TestFencedRealRedis(t *testing.T) {
	t.Setenv("REDIS_ADDR", redistest.Start(t).Addr)
	checkRun(t)
}

// TestShip: the fenced write itself. A token below the row's is refused
// and changes nothing; so is the same token again (fence < token); a
// larger one writes.
func TestShip(t *testing.T) {
	ctx := context.Background()
	db, err := openDB(ctx, t.TempDir())
	require.NoError(t, err)
	defer db.Close()
	state := func() (status string, fence int64, history int) {
		require.NoError(t, db.QueryRowContext(ctx, `SELECT status, fence FROM orders WHERE id = 1`).Scan(&status, &fence))
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM history`).Scan(&history))
		return
	}
	require.NoError(t, ship(ctx, db, 1, "a", 5))
	for _, stale := range []uint64{3, 5} {
		require.ErrorIs(t, ship(ctx, db, 1, "b", stale), errFenced, "token %d", stale)
		status, fence, history := state()
		require.Equal(t, "shipped by a", status)
		require.Equal(t, int64(5), fence)
		require.Equal(t, 1, history, "a refused write left a history row")
	}
	require.NoError(t, ship(ctx, db, 1, "c", 7))
	status, fence, history := state()
	require.Equal(t, "shipped by c", status)
	require.Equal(t, int64(7), fence)
	require.Equal(t, 2, history)
}
