package dsync

import (
	"context"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A record wait (a Group key's, a Once's) whose context has ended before
// a look is sent sends nothing and leaves nothing in Redis: every look
// before it was answered, so no begin of the call is in flight and there
// is nothing to undo. The undo it got before kept the call in the undone
// set for a lease (30 s) for nothing: most failures of
// TestGroupWaiterCancel were that tombstone, its cancel having come just
// before the cancelled waiter's next look (a poll while its subscription
// was not live yet, or the look after it went live). A wait meets a
// context ended before its first look only by a race with Do's own check;
// here it is called with one directly: the same state, without the race.
func TestRecordWaitUnsentLeavesNothing(t *testing.T) {
	s := redistest.Start(t)
	kinds := map[string]func(c *Client) (*runRecord, string){
		"group": func(c *Client) (*runRecord, string) {
			gc := NewGroup[int](c, "g").newCall("k")
			return &gc.rec, gc.call
		},
		"once": func(c *Client) (*runRecord, string) { return &c.NewOnce("o").runRecord, c.attemptID() },
	}
	for name, rec := range kinds {
		t.Run(name, func(t *testing.T) {
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rc.Close)
			prefix := "unsent" + name
			c, err := NewClient(rc, WithKeyPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			r, call := rec(c)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			w, err := r.wait(ctx, "owner", call)
			require.ErrorIs(t, err, context.Canceled)
			require.Nil(t, w.h)
			// Close waits for the Client's cleanups (an undo among them).
			require.NoError(t, c.Close())
			keys, err := rc.Do(context.Background(), rc.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
			require.NoError(t, err)
			require.Empty(t, keys, "keys left by a wait that sent nothing")
		})
	}
}
