package dsync

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// stuckTags is a rueidis client whose calls that read a lock's hold tags
// (the blockers' read, tagger.read) wait, whatever their context, until
// release is closed, as rueidis makes a call wait for a connection
// another call is opening (see bounded); entered is closed when the first
// one waits.
type stuckTags struct {
	rueidis.Client
	entered, release chan struct{}
	once             sync.Once
}

func (r *stuckTags) stall(cmds ...rueidis.Completed) {
	for _, c := range cmds {
		if a := c.Commands(); a[0] == "HGETALL" && strings.HasSuffix(a[1], ":tags") {
			r.once.Do(func() { close(r.entered) })
			<-r.release
			return
		}
	}
}

func (r *stuckTags) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.stall(cmd)
	return r.Client.Do(ctx, cmd)
}

func (r *stuckTags) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	r.stall(cmds...)
	return r.Client.DoMulti(ctx, cmds...)
}

// A wait whose context ended returns by it even while the read of its
// blockers from Redis (Observer.HoldTag: AcquireDone.Blockers, read when
// the wait ends) is held behind another call's dial, which rueidis makes
// it wait for whatever its context: it waits for the read only as long as
// a cleanup on its way out may (cleanupNow: its deadline, or now, plus
// cleanupGrace), then reports the blockers it knows without it. The read
// ran inline under the Client's own context for up to cleanupTimeout
// (2 s); in the fault suite's connection-reset rows (every Client with a
// HoldTag) a FairMutex wait returned 266 ms after its context ended. Here
// the read is held until the wait has returned: before the fix the wait
// did not return (10 s).
func TestWaitEndedNotBehindItsBlockersRead(t *testing.T) {
	s := redistest.Start(t)
	kinds := map[string]func(c *Client) func(context.Context) (context.Context, error){
		"mutex": func(c *Client) func(context.Context) (context.Context, error) { return c.NewMutex("x").LockContext },
		"fair":  func(c *Client) func(context.Context) (context.Context, error) { return c.NewFairMutex("x").LockContext },
		"rw":    func(c *Client) func(context.Context) (context.Context, error) { return c.NewRWMutex("x").LockContext },
		"semaphore": func(c *Client) func(context.Context) (context.Context, error) {
			return func(ctx context.Context) (context.Context, error) { return c.NewSemaphore("x", 1).Acquire(ctx, 1) }
		},
	}
	for name, lock := range kinds {
		t.Run(name, func(t *testing.T) {
			dial := func() rueidis.Client {
				rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
				require.NoError(t, err)
				t.Cleanup(rc.Close)
				return rc
			}
			obs := Observer{HoldTag: func(context.Context, AcquireDone) string { return "tag" }}
			newC := func(rc rueidis.Client) *Client {
				c, err := NewClient(rc, WithKeyPrefix("stuck"+name), WithLease(10*time.Second), WithObserver(obs))
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				return c
			}
			h := newC(dial())
			st := &stuckTags{Client: dial(), entered: make(chan struct{}), release: make(chan struct{})}
			released := false
			defer func() {
				if !released {
					close(st.release)
				}
			}()
			w := newC(st)
			_, err := lock(h)(context.Background())
			require.NoError(t, err)
			// The wait, queued behind h's hold in Redis, then cancelled.
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan error, 1)
			go func() {
				_, err := lock(w)(ctx)
				got <- err
			}()
			// Queued, as the waiting Client knows it: its attempt's reply
			// said the lock is held in Redis (tagLock.foreign). Redis
			// lists the waiter before that reply arrives, and a wait
			// cancelled in between never learns that holds of other
			// Clients blocked it, so it has no blockers to read.
			deadline := time.Now().Add(10 * time.Second)
			for !foreignWait(w) {
				require.True(t, time.Now().Before(deadline), "the wait did not queue")
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			select {
			case <-st.entered:
			case err := <-got:
				t.Fatalf("the wait returned without reading its blockers: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no read of the blockers")
			}
			select {
			case err := <-got:
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not return when its context ended: it waits for the read of its blockers")
			}
			released = true
			close(st.release)
		})
	}
}

// foreignWait reports whether a wait of c found its lock held in Redis
// (see tagger.waiting).
func foreignWait(c *Client) bool {
	c.tags.mu.Lock()
	defer c.tags.mu.Unlock()
	for _, tl := range c.tags.locks {
		if tl.foreign > 0 {
			return true
		}
	}
	return false
}
