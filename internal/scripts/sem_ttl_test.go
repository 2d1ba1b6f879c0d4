package scripts_test

import (
	"context"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/stretchr/testify/require"
)

// The semaphore's keys all live until an hour past the last lease or queue
// place, though most calls only look (one PTTL) instead of setting them
// all: a key a call creates gets its expiry at once, and a lease longer
// than the keys' time left moves every key's expiry past it.
func TestSemaphoreKeysLifetime(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	ttls := func() map[string]int64 {
		out := map[string]int64{}
		for _, k := range semKeys {
			ttl, err := rc.Do(ctx, rc.B().Pttl().Key(k).Build()).AsInt64()
			require.NoError(t, err)
			if ttl != -2 { // the key exists
				out[k] = ttl
			}
		}
		return out
	}
	hour := int64(3600000)
	check := func(what string, atLeast int64) {
		t.Helper()
		for k, ttl := range ttls() {
			require.GreaterOrEqual(t, ttl, atLeast, "%s: %s has %d ms left", what, k, ttl)
		}
	}
	// A holder (creates the hash, holders and permits), a waiter (creates
	// the queue keys), a cancelled waiter (creates the undone set).
	a := semAcq(t, rc, "A", "wa", 4, 4, "10000", "wait")
	require.Equal(t, int64(1), a[0], "A = %v", a)
	check("after the first acquisition", hour-5000)
	b := semAcq(t, rc, "B", "wb", 1, 4, "10000", "wait")
	require.Equal(t, int64(0), b[0], "B = %v, want queued", b)
	require.Len(t, ttls(), 4, "every key but the undone set exists")
	check("after a waiter queued", hour-5000)
	require.NoError(t, scripts.SemUndo.Exec(ctx, rc, semKeys, []string{"wb", semCh, "10000"}).Error())
	require.Contains(t, ttls(), semKeys[4], "the undone set exists")
	check("after the waiter gave up", hour-5000)
	// A lease of 2 hours: the keys outlive it by the hour.
	semRel(t, rc, "A", 4)
	c := semAcq(t, rc, "C", "wc", 1, 4, "7200000", "wait")
	require.Equal(t, int64(1), c[0], "C = %v", c)
	check("after a 2 h lease", 3*hour-5000)
}

// A release of a semaphore that does not exist (an owner that holds
// nothing) answers {0, 0} and creates no key: its prune once recorded the
// next lease end into a meta hash it took for existing (HMGET's missing
// size is false in Lua, not nil), a hash without a size and without a
// lifetime (FuzzOperations saw it as a semaphore of size 0).
func TestSemaphoreReleaseOfNothingCreatesNothing(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	r := semRel(t, rc, "A", 1)
	require.Equal(t, []int64{0, 0}, r, "release by an owner of nothing")
	for _, k := range semKeys {
		n, err := rc.Do(ctx, rc.B().Exists().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "%s exists after a release of nothing", k)
	}
}
