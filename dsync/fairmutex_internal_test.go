package dsync

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A FairMutex hold lost in Redis before this Client noticed is replaced by
// the next owner's; when the old hold's lease clock then ends it, the
// Client keeps no state for the name.
func TestFairStaleHoldState(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	c, err := NewClient(rc, WithKeyPrefix("stale"))
	require.NoError(t, err)
	defer c.Close()
	const lease = 300 * time.Millisecond
	f := c.NewFairMutex("f", WithLeaseTime(lease))
	a, err := f.LockContext(context.Background())
	require.NoError(t, err)
	// Lost in Redis; the Client learns it only when a's lease clock ends.
	require.NoError(t, rc.Do(context.Background(), rc.B().Del().Key("stale:{f}:fair").Build()).Error())
	b, err := f.LockContext(context.Background())
	require.NoError(t, err)
	require.NoError(t, f.UnlockContext(b))
	select {
	case <-a.Done():
	case <-time.After(5 * lease):
		t.Fatal("the stale hold never ended")
	}
	require.ErrorIs(t, context.Cause(a), ErrLockLost, "stale hold")
	waitUntil(t, time.Second, "the Client to forget the name", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.mutexes)+len(c.mutexesBy) == 0
	})
}
