package dsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A round sent in several pipelines renews every hold: 35 holds in batches
// of 4 and pipelines of 8 holds (five pipelines a round, sent at once), a
// 300 ms lease, and none lost over 6 leases.
func TestRenewalInChunks(t *testing.T) {
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, WithKeyPrefix("chunks"), WithLease(300*time.Millisecond), withRenewSizes(4, 8))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	var lctxs []context.Context
	for i := range 35 {
		var l context.Context
		if i%5 == 0 {
			l, err = c.NewFairMutex(fmt.Sprintf("f%d", i)).LockContext(ctx)
		} else {
			l, err = c.NewMutex(fmt.Sprintf("m%d", i)).LockContext(ctx)
		}
		require.NoError(t, err)
		lctxs = append(lctxs, l)
	}
	// Proving a negative: for 6 leases no hold may be lost.
	deadline := time.Now().Add(1800 * time.Millisecond)
	for time.Now().Before(deadline) {
		for i, l := range lctxs {
			require.NoError(t, l.Err(), "hold %d lost: %v", i, context.Cause(l))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
