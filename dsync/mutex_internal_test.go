package dsync

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
)

// Handoffs inside a Client take consecutive tokens from the block the
// acquisition reserved in Redis, and the next acquisition anywhere starts
// above the whole block.
func TestMutexTokenBlock(t *testing.T) {
	s := redistest.Start(t)
	newC := func(opts ...Option) *Client {
		rc := s.Client(t)
		c, err := NewClient(rc, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := newC(WithMaxLocalHandoffs(4))
	other := newC()
	m := c.NewMutex("blk")
	first, err := m.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type held struct {
		ctx context.Context
		tok uint64
	}
	got := make(chan held, 3)
	for i := 0; i < 3; i++ {
		go func() {
			l, err := m.LockContext(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			tok, _ := FencingToken(l)
			got <- held{l, tok}
		}()
	}
	// All three wait in the local queue before the first release.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := c.getMutex(m.key)
		st.mu.Lock()
		n := len(st.queue)
		st.mu.Unlock()
		c.putMutex(m.key, st)
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d local waiters, want 3", n)
		}
		time.Sleep(time.Millisecond)
	}
	tok0, _ := FencingToken(first)
	prev, cur := tok0, first
	for i := 0; i < 3; i++ {
		if err := m.UnlockContext(cur); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if h.tok != prev+1 {
			t.Fatalf("handoff %d: token %d, want %d (the next of the block)", i+1, h.tok, prev+1)
		}
		prev, cur = h.tok, h.ctx
	}
	// Redis still records the block's last token under the first owner.
	rc := s.Client(t)
	owner0, _ := OwnerOf(first)
	want := owner0 + " " + strconv.FormatUint(tok0+3, 10) + " 1"
	if v, _ := rc.Do(context.Background(), rc.B().Get().Key(m.key).Build()).ToString(); v != want {
		t.Fatalf("lock value %q, want %q", v, want)
	}
	if err := m.UnlockContext(cur); err != nil {
		t.Fatal(err)
	}
	l, err := other.NewMutex("blk").LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := FencingToken(l); tok <= tok0+3 {
		t.Fatalf("next acquisition's token %d is not above the reserved block (up to %d)", tok, tok0+3)
	}
	if err := other.NewMutex("blk").UnlockContext(l); err != nil {
		t.Fatal(err)
	}
}
