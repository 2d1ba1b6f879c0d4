package dsync_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every lock's sync.Locker side is one adapter: the same behaviour for
// each. Two lockers of the same lock (two Clients, as two processes would)
// exclude each other, TryLock fails while it is held, Unlock may come from
// another goroutine, and an Unlock with nothing locked panics with one
// message, naming the lock. (A Semaphore's Locker(1) of size 1 is a mutex.)
func TestSyncLockerContract(t *testing.T) {
	c1 := newClient(t)
	c2 := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefixOf(t, c1)))
	for _, tc := range []struct {
		what, name string
		mk         func(c *dsync.Client) sync.Locker
	}{
		{"Mutex", "l", func(c *dsync.Client) sync.Locker { return c.NewMutex("l") }},
		{"FairMutex", "l", func(c *dsync.Client) sync.Locker { return c.NewFairMutex("l") }},
		{"RWMutex", "l", func(c *dsync.Client) sync.Locker { return c.NewRWMutex("l") }},
		{"RedLock", "l", func(c *dsync.Client) sync.Locker { return dsync.NewRedLock("l", []*dsync.Client{c}) }},
		{"Semaphore", "l", func(c *dsync.Client) sync.Locker { return c.NewSemaphore("l", 1).Locker(1) }},
		{"MultiLock", "ml-a,ml-b", func(c *dsync.Client) sync.Locker {
			return dsync.NewMultiLock(c.NewMutex("ml-a"), c.NewMutex("ml-b"))
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			a, b := tc.mk(c1), tc.mk(c2)
			a.Lock()
			if tb, ok := b.(tryLocker); ok {
				require.False(t, tb.TryLock(), "TryLock through another Client succeeded while held")
			}
			got := make(chan struct{})
			go func() {
				b.Lock() // waits for a's Unlock
				close(got)
			}()
			select {
			case <-got:
				t.Fatal("Lock through another Client got a held lock")
			case <-time.After(50 * time.Millisecond):
			}
			done := make(chan struct{})
			go func() { a.Unlock(); close(done) }() // from another goroutine
			<-done
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting Lock did not get the lock after Unlock")
			}
			b.Unlock()
			assert.PanicsWithValue(t, fmt.Sprintf("dsync: unlock of unlocked %s %q", tc.what, tc.name), b.Unlock, "Unlock of an unlocked %s", tc.what)
		})
	}
	t.Run("RLocker", func(t *testing.T) {
		rw := c1.NewRWMutex("r")
		rl := rw.RLocker()
		rl.Lock()
		rl.Lock() // readers share
		require.False(t, rw.TryLock(), "a writer got in while read-locked")
		rl.Unlock()
		rl.Unlock()
		require.True(t, rw.TryLock(), "the write lock is not free after both RUnlocks")
		rw.Unlock()
		assert.PanicsWithValue(t, `dsync: RUnlock of unlocked RWMutex "r"`, rl.Unlock, "RUnlock with no read lock")
	})
}
