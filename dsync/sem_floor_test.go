package dsync_test

import (
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Redis work of one uncontended Semaphore cycle (Acquire + Release of
// a permit), counted by the server with the scripts' own commands: the
// housekeeping (key lifetimes) runs in full only when a key may have been
// created, else one PTTL.
func TestSemaphoreCommandsPerCycle(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("semfloor"))
	ctx := ctxT(t)
	sem := c.NewSemaphore("s", 4)
	cycle := func() {
		l, err := sem.Acquire(ctx, 1)
		require.NoError(t, err)
		require.NoError(t, sem.Release(l, 1))
	}
	cycle()
	rc := s.Client(t)
	resetStats(t, ctx, rc, c)
	const n = 300
	for range n {
		cycle()
	}
	total, info := commandCalls(t, ctx, rc)
	t.Logf("Semaphore: %.2f Redis commands per Acquire/Release cycle\n%s", float64(total)/n, info)
	assert.LessOrEqual(t, total, 40*n+2, "Redis commands per Acquire/Release cycle")
}
