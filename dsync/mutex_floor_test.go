package dsync_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Redis work of one uncontended cycle, counted by the server (INFO
// commandstats, commands inside scripts included), on a private server:
// acquire = EVALSHA + MGET (lock and undo mark) + TIME + SET, release =
// EVALSHA + SET ... GET (the free marker replaces the value); no PUBLISH,
// since no waiter marked the lock. A caller-supplied owner adds the attempt
// marker (SET, then DEL once the reply is in).
func TestMutexCommandsPerCycle(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t))
	ctx := ctxT(t)
	m := c.NewMutex("floor")
	rc := s.Client(t)
	for _, tc := range []struct {
		name  string
		cycle func()
		max   float64
	}{
		{"LockContext", func() {
			l, err := m.LockContext(ctx)
			require.NoError(t, err)
			require.NoError(t, m.UnlockContext(l))
		}, 6},
		{"Lock", lockUnlock(m), 6},
		{"WithOwner", func() {
			l, err := m.LockContext(dsync.WithOwner(ctx))
			require.NoError(t, err)
			require.NoError(t, m.UnlockContext(l))
		}, 8},
	} {
		tc.cycle() // scripts loaded
		resetStats(t, ctx, rc, c)
		const n = 500
		for range n {
			tc.cycle()
		}
		total, info := commandCalls(t, ctx, rc)
		per := float64(total) / n
		t.Logf("%s: %.2f Redis commands per cycle", tc.name, per)
		// Up to 2 commands of slack in all: the background DEL of the
		// previous phase's last marker may land after the reset.
		assert.LessOrEqual(t, total, int(tc.max*n)+2, "%s: %.2f Redis commands per cycle, want at most %v:\n%s", tc.name, per, tc.max, info)
	}
}

// Allocations of one uncontended cycle, rueidis' included (issue 27's
// target: at most 4): the fresh owner (its undo mark's key in the same
// bytes, with room for the hold's value prefix, which the release sends:
// ownerTag), the hold (the first lock context and its cancel inside), the
// cancelCtx and its cancel func. The attempt (arguments and reply in
// place) comes from a pool, the per-Client lock state is reused and the
// release's arguments are on the stack; the acquire script's reply is a bare integer:
// rueidis reads it into no array. Unlock needs no context. The bounds are
// today's counts, so that a change that adds one is seen.
func TestMutexAllocsPerCycle(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	m := c.NewMutex("allocs")
	// AllocsPerRun counts the whole process's allocations: whatever else
	// runs (a test's Client winding down, rueidis' own goroutines) can only
	// add to them, so the least of 5 measurements is the cycle's.
	least := func(f func()) float64 {
		n := testing.AllocsPerRun(500, f)
		for range 4 {
			n = min(n, testing.AllocsPerRun(500, f))
		}
		return n
	}
	lockCtx := least(func() {
		l, err := m.LockContext(ctx)
		require.NoError(t, err)
		require.NoError(t, m.UnlockContext(l))
	})
	locker := least(lockUnlock(m))
	t.Logf("allocations per cycle: LockContext/UnlockContext %.1f, Lock/Unlock %.1f", lockCtx, locker)
	assert.LessOrEqual(t, lockCtx, float64(4+raceExtraAllocs), "allocations per LockContext/UnlockContext cycle")
	assert.LessOrEqual(t, locker, float64(4+raceExtraAllocs), "allocations per Lock/Unlock cycle")
}

// lockUnlock is one sync.Locker cycle of m, the critical section empty:
// the cycle is what is measured.
func lockUnlock(m *dsync.Mutex) func() {
	return func() {
		m.Lock()
		//lint:ignore SA2001 the lock's own cost is what is measured
		m.Unlock()
	}
}

// The arguments of one uncontended cycle's scripts (issue 27: each key or
// argument costs Redis 1.2-1.5k instructions; 1.7-2.1k by issue 40's
// study): the acquire sends the lock key and the owner (the waiting hash,
// the count 1, the default lease and the waiting Client, the owner less
// its last 16 characters, are named or defaulted by the script; the
// owner's deadline replaces the undo mark: srvclock.go); the release the
// lock key and the hold ("<owner> <token> "). Both as functions (FCALL).
func TestMutexArgsPerCycle(t *testing.T) {
	s := redistest.Start(t)
	rec := &evalRecorder{Client: s.Client(t), sizes: map[string][]int{}}
	c := newClientOn(t, rec)
	ctx := ctxT(t)
	m := c.NewMutex("args")
	<-dsync.Preloaded(c)
	// The Client's first acquisition tells it the server clock; the
	// owners of the later ones carry a deadline by it (srvclock.go),
	// which lets the acquire go as the owner alone.
	l, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(l))
	acq, _ := scripts.Function(scripts.MutexAcquire, false)
	rel, _ := scripts.Function(scripts.MutexRelease, false)
	for _, tc := range []struct {
		name  string
		cycle func()
	}{
		{"LockContext", func() {
			l, err := m.LockContext(ctx)
			require.NoError(t, err)
			require.NoError(t, m.UnlockContext(l))
		}},
		{"Lock", lockUnlock(m)},
	} {
		rec.reset()
		tc.cycle()
		got := rec.get()
		assert.Equal(t, []int{2}, got[acq], "%s: keys and arguments of the acquire", tc.name)
		assert.Equal(t, []int{2}, got[rel], "%s: keys and arguments of the release", tc.name)
	}
}

// evalRecorder records, per script SHA-1 or function name, how many keys
// and arguments each EVALSHA or FCALL sent through it carried.
type evalRecorder struct {
	rueidis.Client
	mu    sync.Mutex
	sizes map[string][]int
}

func (r *evalRecorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) >= 3 && (strings.EqualFold(cs[0], "EVALSHA") || strings.EqualFold(cs[0], "FCALL")) {
		r.mu.Lock()
		r.sizes[cs[1]] = append(r.sizes[cs[1]], len(cs)-3) // EVALSHA sha numkeys, FCALL function numkeys
		r.mu.Unlock()
	}
	return r.Client.Do(ctx, cmd)
}

func (r *evalRecorder) reset() {
	r.mu.Lock()
	clear(r.sizes)
	r.mu.Unlock()
}

func (r *evalRecorder) get() map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.sizes)
}
