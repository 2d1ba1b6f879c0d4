package dsync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
)

// A FairMutex hold lost in Redis before this Client noticed is replaced by
// the next owner's; when the old hold's lease clock then ends it, the
// Client keeps no state for the name.
func TestFairStaleHoldState(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	c, err := NewClient(rc, WithKeyPrefix("stale"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const lease = 300 * time.Millisecond
	f := c.NewFairMutex("f", WithLeaseTime(lease))
	a, err := f.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Lost in Redis; the Client learns it only when a's lease clock ends.
	if err := rc.Do(context.Background(), rc.B().Del().Key("stale:{f}:fair").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b, err := f.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.UnlockContext(b); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(5 * lease):
		t.Fatal("the stale hold never ended")
	}
	if !errors.Is(context.Cause(a), ErrLockLost) {
		t.Fatalf("stale hold ended with %v, want ErrLockLost", context.Cause(a))
	}
	waitUntil(t, time.Second, "the Client to forget the name", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.mutexes) == 0
	})
}
