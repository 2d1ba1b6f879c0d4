package dsync_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A wait whose context ends while it is woken (between two looks: every
// look before was answered) sends no further look and so has nothing of
// one to undo: its Client sends neither an acquire attempt nor an undo of
// one after the cancel (an attempt under an ended context is abandoned,
// and its undo would tombstone it for nothing). The lock is then free
// after its holder's release. The cancel comes from the wait's own
// goroutine as it stops blocking (WithWaitParked), before its next look.
func TestWaitEndedWhenWokenSendsNoLook(t *testing.T) {
	for _, tc := range []struct {
		name      string
		acquire   *rueidis.Lua
		forbidden []*rueidis.Lua // besides the acquire
		// lock takes the lock "we" through c; unlock releases it.
		lock func(c *dsync.Client) (lock func(context.Context) (context.Context, error), unlock func(context.Context) error)
	}{
		{"mutex", scripts.MutexAcquire, []*rueidis.Lua{scripts.MutexUndo, scripts.MutexUndoFresh},
			func(c *dsync.Client) (func(context.Context) (context.Context, error), func(context.Context) error) {
				m := c.NewMutex("we")
				return m.LockContext, m.UnlockContext
			}},
		{"fair", scripts.FairAcquire, []*rueidis.Lua{scripts.FairUndo, scripts.FairUndoFresh},
			func(c *dsync.Client) (func(context.Context) (context.Context, error), func(context.Context) error) {
				m := c.NewFairMutex("we")
				return m.LockContext, m.UnlockContext
			}},
		{"rwmutex", scripts.RWAcquire, []*rueidis.Lua{scripts.RWUndo, scripts.RWUndoFresh},
			func(c *dsync.Client) (func(context.Context) (context.Context, error), func(context.Context) error) {
				m := c.NewRWMutex("we")
				return m.LockContext, m.UnlockContext
			}},
		// (A Semaphore's wait that gives up undoes its queue place with
		// SemUndo either way: only the look is not sent.)
		{"semaphore", scripts.SemAcquire, nil,
			func(c *dsync.Client) (func(context.Context) (context.Context, error), func(context.Context) error) {
				s := c.NewSemaphore("we", 1)
				return func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 1) },
					func(l context.Context) error { return s.Release(l, 1) }
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testPrefix(t)
			ctx := ctxT(t)
			a := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix))
			lockA, unlockA := tc.lock(a)
			held, err := lockA(ctx)
			require.NoError(t, err)

			rec := &scriptCalls{Client: newRueidis(t)}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var armed atomic.Bool
			var fired atomic.Int32
			armed.Store(true)
			// The waiter's fallback poll (lease/3) wakes it; as it stops
			// blocking, its context ends.
			b := newClientOn(t, rec, dsync.WithKeyPrefix(prefix), dsync.WithLease(900*time.Millisecond),
				dsync.WithWaitParked(func(_ string, parked bool) {
					if !parked && armed.CompareAndSwap(true, false) {
						rec.reset()
						cancel()
						fired.Add(1)
					}
				}))
			lockB, _ := tc.lock(b)
			_, err = lockB(wctx)
			require.ErrorIs(t, err, context.Canceled)
			require.EqualValues(t, 1, fired.Load(), "the wait was woken and its context cancelled")
			require.NoError(t, b.Close()) // its background work is done
			sent := rec.names()
			for _, l := range append([]*rueidis.Lua{tc.acquire}, tc.forbidden...) {
				for _, id := range scriptIDs(l) {
					require.NotContains(t, sent, id, "a look (or its undo) sent after the wait's context ended; sent: %v", sent)
				}
			}
			// Redis is consistent: after the holder's release the lock is
			// free.
			require.NoError(t, unlockA(held))
			again, err := lockA(ctx)
			require.NoError(t, err, "the lock after the release")
			require.NoError(t, unlockA(again))
		})
	}
}

// scriptIDs are the names a script is sent by: its SHA-1 (EVALSHA) and
// its function's name (FCALL) in either pub/sub mode's library, if it
// has one.
func scriptIDs(l *rueidis.Lua) []string {
	var ids []string
	if sha, ok := scripts.SHA1(l); ok {
		ids = append(ids, sha)
	}
	for _, sharded := range []bool{false, true} {
		if name, ok := scripts.Function(l, sharded); ok {
			ids = append(ids, name)
		}
	}
	return ids
}

// scriptCalls records the script each EVALSHA or FCALL sent through it
// runs (its SHA-1 or function name).
type scriptCalls struct {
	rueidis.Client
	mu   sync.Mutex
	sent []string
}

func (r *scriptCalls) see(cmd rueidis.Completed) {
	if cs := cmd.Commands(); len(cs) >= 2 && (strings.EqualFold(cs[0], "EVALSHA") || strings.EqualFold(cs[0], "FCALL") || strings.EqualFold(cs[0], "EVAL")) {
		r.mu.Lock()
		r.sent = append(r.sent, cs[1])
		r.mu.Unlock()
	}
}

func (r *scriptCalls) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.see(cmd)
	return r.Client.Do(ctx, cmd)
}

func (r *scriptCalls) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, c := range multi {
		r.see(c)
	}
	return r.Client.DoMulti(ctx, multi...)
}

func (r *scriptCalls) reset() {
	r.mu.Lock()
	r.sent = nil
	r.mu.Unlock()
}

func (r *scriptCalls) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sent...)
}
