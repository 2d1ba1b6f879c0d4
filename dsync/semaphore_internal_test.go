package dsync

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
)

func semHoldsLen(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, byOwner := range c.semHolds {
		n += len(byOwner)
	}
	return n
}

// TestSemaphoreHoldsForgotten: the shared record of acquisitions lets one
// Semaphore value release another's, and keeps nothing once the holds end,
// by release, loss or Close.
func TestSemaphoreHoldsForgotten(t *testing.T) {
	rc := redistest.Start(t).Client(t)
	c, err := NewClient(rc, WithKeyPrefix("internal"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	s1, s2 := c.NewSemaphore("h", 3), c.NewSemaphore("h", 3)
	l, err := s1.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if semHoldsLen(c) != 1 {
		t.Fatal("acquisition not recorded")
	}
	if err := s2.Release(l, 2); err != nil {
		t.Fatal(err)
	}
	if l.Err() == nil {
		t.Fatal("release through another value did not cancel the lock context")
	}
	deadline := time.Now().Add(2 * time.Second)
	for semHoldsLen(c) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("released acquisition still recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s1.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Acquire(WithOwner(ctx), 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline = time.Now().Add(2 * time.Second)
	for semHoldsLen(c) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("holds ended by Close still recorded")
		}
		time.Sleep(time.Millisecond)
	}
}
