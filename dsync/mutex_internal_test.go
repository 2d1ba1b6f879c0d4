package dsync

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Handoffs inside a Client take consecutive tokens from the block a
// handoff through Redis reserved (an acquisition reserves one only when
// goroutines of its Client wait: the first acquisition here had none, so
// the first handoff goes through Redis), and the next acquisition anywhere
// starts above the whole block.
func TestMutexTokenBlock(t *testing.T) {
	s := redistest.Start(t)
	newC := func(opts ...Option) *Client {
		rc := s.Client(t)
		c, err := NewClient(rc, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := newC(WithMaxLocalHandoffs(4))
	other := newC()
	m := c.NewMutex("blk")
	first, err := m.LockContext(context.Background())
	require.NoError(t, err)
	type held struct {
		ctx context.Context
		tok uint64
	}
	got := make(chan held, 3)
	for i := 0; i < 3; i++ {
		go func() {
			l, err := m.LockContext(context.Background())
			if !assert.NoError(t, err) {
				return
			}
			tok, _ := FencingToken(l)
			got <- held{l, tok}
		}()
	}
	// All three wait in the local queue before the first release.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st := c.getMutex(m.sk())
		st.mu.Lock()
		n := len(st.queue)
		st.mu.Unlock()
		c.putMutex(m.sk(), st)
		assert.Equal(ct, 3, n, "local waiters")
	}, 5*time.Second, time.Millisecond, "the three waiters did not all queue locally")
	tok0, _ := FencingToken(first)
	rc := s.Client(t)
	v, _ := rc.Do(context.Background(), rc.B().Get().Key(m.key).Build()).ToString()
	owner0, _ := OwnerOf(first)
	require.Equal(t, owner0+" "+strconv.FormatUint(tok0, 10)+" 1", v, "lock value of an acquisition nobody waited for: no block")
	require.NoError(t, m.UnlockContext(first))
	h1 := <-got
	require.Greater(t, h1.tok, tok0, "handoff 1 (through Redis): token")
	prev, cur := h1.tok, h1.ctx
	for i := 1; i < 3; i++ {
		require.NoError(t, m.UnlockContext(cur))
		h := <-got
		require.Equal(t, prev+1, h.tok, "handoff %d: token (the next of the block)", i+1)
		prev, cur = h.tok, h.ctx
	}
	// Redis still records the block's last token under handoff 1's owner.
	owner1, _ := OwnerOf(h1.ctx)
	want := owner1 + " " + strconv.FormatUint(h1.tok+3, 10) + " 1 b"
	v, _ = rc.Do(context.Background(), rc.B().Get().Key(m.key).Build()).ToString()
	require.Equal(t, want, v, "lock value")
	require.NoError(t, m.UnlockContext(cur))
	l, err := other.NewMutex("blk").LockContext(context.Background())
	require.NoError(t, err)
	tok, _ := FencingToken(l)
	require.Greater(t, tok, h1.tok+3, "next acquisition's token")
	require.NoError(t, other.NewMutex("blk").UnlockContext(l))
}

// waitUntil polls cond until it holds, failing after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out after %v waiting for %s", d, what)
		time.Sleep(time.Millisecond)
	}
}

// queued reports how many goroutines of c wait locally for the mutex key.
func queued(c *Client, key string) int {
	c.mu.Lock()
	st := c.mutexes[key]
	c.mu.Unlock()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.queue)
}

// A handoff through Redis to the owner Redis already names (the one that
// reserved the block, which stays recorded through local handoffs) is a
// real handoff with a new token, not a retry of an applied one: tokens keep
// growing. (Found in review: the script's retry check matched it and handed
// the old block out again.)
func TestMutexHandoffToRecordedOwner(t *testing.T) {
	s := redistest.Start(t)
	c, err := NewClient(s.Client(t), WithMaxLocalHandoffs(2), WithKeyPrefix("rec"))
	require.NoError(t, err)
	defer c.Close()
	m := c.NewMutex("m")
	ctxA, ctxB := WithOwner(context.Background()), WithOwner(context.Background())
	lockAsync := func(ctx context.Context) <-chan context.Context {
		got := make(chan context.Context, 1)
		go func() {
			l, err := m.LockContext(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		return got
	}
	lA, err := m.LockContext(ctxA) // reserves tokens t1, t1+1; Redis names A
	require.NoError(t, err)
	gotB := lockAsync(ctxB)
	waitUntil(t, 5*time.Second, "B to queue", func() bool { return queued(c, m.key) == 1 })
	require.NoError(t, m.UnlockContext(lA)) // local handoff: B gets t1+1
	lB := <-gotB
	gotA := lockAsync(ctxA)
	waitUntil(t, 5*time.Second, "A to queue again", func() bool { return queued(c, m.key) == 1 })
	require.NoError(t, m.UnlockContext(lB)) // block used up: handoff through Redis to A
	lA2 := <-gotA
	t1, _ := FencingToken(lA)
	t2, _ := FencingToken(lB)
	t3, _ := FencingToken(lA2)
	require.Less(t, t1, t2, "fencing tokens %d, %d, %d: not strictly increasing", t1, t2, t3)
	require.Less(t, t2, t3, "fencing tokens %d, %d, %d: not strictly increasing", t1, t2, t3)
	require.NoError(t, m.UnlockContext(lA2))
}

// An owner whose Client handed the lock to another of its owners (from a
// block of tokens, without telling Redis) does not re-enter through another
// Client: the value still names it, but it holds nothing. (It used to: the
// re-entry succeeded while the other owner held the lock.)
func TestMutexNoCrossClientReentryAfterLocalHandoff(t *testing.T) {
	s := redistest.Start(t)
	newC := func(opts ...Option) *Client {
		c, err := NewClient(s.Client(t), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newC(WithMaxLocalHandoffs(100)), newC()
	ma, mb := a.NewMutex("x"), b.NewMutex("x")
	octx := WithOwner(context.Background())
	// Goroutines of a wait while o holds, so a handoff through Redis
	// reserves a block, and the next handoff is local.
	l1, err := ma.LockContext(octx)
	require.NoError(t, err)
	got := make(chan context.Context, 2)
	for range 2 {
		go func() {
			l, err := ma.LockContext(context.Background())
			if assert.NoError(t, err) {
				got <- l
			}
		}()
	}
	waitUntil(t, 5*time.Second, "two local waiters", func() bool {
		st := a.getMutex(ma.sk())
		defer a.putMutex(ma.sk(), st)
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.queue) == 2
	})
	require.NoError(t, ma.UnlockContext(l1)) // through Redis: a block for the second waiter
	l2 := <-got
	o2, _ := OwnerOf(l2)
	require.NoError(t, ma.UnlockContext(l2)) // local: the value still names o2
	l3 := <-got
	// o2 holds nothing now; it must not re-enter through b.
	tctx, tcancel := context.WithTimeout(withOwnerVal(context.Background(), ownerVal{owner: o2}), 300*time.Millisecond)
	defer tcancel()
	l4, err := mb.LockContext(tctx)
	if err == nil {
		t4, _ := FencingToken(l4)
		t3, _ := FencingToken(l3)
		_ = mb.UnlockContext(l4)
		t.Fatalf("%s re-entered through another Client (token %d) while another owner holds the lock (token %d)", o2, t4, t3)
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, ma.UnlockContext(l3))
}
