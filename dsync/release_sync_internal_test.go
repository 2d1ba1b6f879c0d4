package dsync

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ctxRecorder is a rueidis client that counts the calls made through it
// and records those made under a context that makes rueidis move the
// connection to its pipelining goroutines: one that can be cancelled
// (Done is not nil) and has no deadline (rueidis v1.0.79, pipe.Do: such a
// call goes to the queue and starts p.background, for good).
type ctxRecorder struct {
	rueidis.Client
	mu         sync.Mutex
	calls      int
	pipelining []string
}

func (r *ctxRecorder) note(ctx context.Context, cmds ...rueidis.Completed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if _, ok := ctx.Deadline(); ok || ctx.Done() == nil {
		return
	}
	w := cmds[0].Commands()
	r.pipelining = append(r.pipelining, strings.Join(w[:min(3, len(w))], " "))
}

func (r *ctxRecorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.note(ctx, cmd)
	return r.Client.Do(ctx, cmd)
}

func (r *ctxRecorder) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	r.note(ctx, cmds...)
	return r.Client.DoMulti(ctx, cmds...)
}

// take returns what was recorded since the last take, and forgets it.
func (r *ctxRecorder) take() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, p := r.calls, r.pipelining
	r.calls, r.pipelining = 0, nil
	return n, p
}

// A release whose caller gave no deadline (sync.Locker's Unlock; the lock
// context of context.Background(), the most common way to call
// LockContext) is sent under context.Background(), which cannot be
// cancelled, so rueidis keeps answering a caller who locks one lock at a
// time on the caller's goroutine. Before, it ran under the Client's context (cancellable, no
// deadline): the first Unlock moved the connection to rueidis' pipelining
// goroutines for good, about 25 us more per Lock/Unlock cycle (bench:
// dsync-locker 1.57x raw against dsync's 1.21x, d76c8b4). Only the
// Mutex's releases did (its lock context has no deadline: a watchdog
// hold), and an Election's calls: Campaign waited under a cancellable
// stand-in for ctx even when ctx was context.Background(), and Proclaim
// and Resign ran under the leadership context (cancellable, no deadline).
// The other kinds' are here so that none starts to.
func TestReleaseWithoutDeadlineKeepsConnectionSync(t *testing.T) {
	s := redistest.Start(t)
	rec := &ctxRecorder{Client: s.Client(t)}
	c, err := NewClient(rec)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	bg := context.Background()
	type cycle func() error
	locker := func(l sync.Locker) cycle {
		return func() error {
			l.Lock()
			//lint:ignore SA2001 the lock's own calls are what is checked
			l.Unlock()
			return nil
		}
	}
	lockCtx := func(lock func(context.Context) (context.Context, error), unlock func(context.Context) error) cycle {
		return func() error {
			lctx, err := lock(bg)
			if err != nil {
				return err
			}
			return unlock(lctx)
		}
	}
	m, f, rw, sem := c.NewMutex("sync-m"), c.NewFairMutex("sync-f"), c.NewRWMutex("sync-rw"), c.NewSemaphore("sync-s", 2)
	el := c.NewElection("sync-e")
	for _, k := range []struct {
		name string
		run  cycle
	}{
		{"Mutex Lock/Unlock", locker(m)},
		{"Mutex LockContext(Background)/UnlockContext", lockCtx(m.LockContext, m.UnlockContext)},
		{"FairMutex Lock/Unlock", locker(f)},
		{"FairMutex LockContext(Background)/UnlockContext", lockCtx(f.LockContext, f.UnlockContext)},
		{"RWMutex Lock/Unlock", locker(rw)},
		{"RWMutex RLocker", locker(rw.RLocker())},
		{"RWMutex RLockContext(Background)/RUnlockContext", lockCtx(rw.RLockContext, rw.RUnlockContext)},
		{"Semaphore Locker(1)", locker(sem.Locker(1))},
		{"Semaphore Acquire(Background, 1)/Release", func() error {
			lctx, err := sem.Acquire(bg, 1)
			if err != nil {
				return err
			}
			return sem.Release(lctx, 1)
		}},
		{"Election Campaign(Background)/Proclaim/Resign", func() error {
			lctx, err := el.Campaign(bg, "a")
			if err != nil {
				return err
			}
			if err := el.Proclaim(lctx, "b"); err != nil {
				return err
			}
			return el.Resign(lctx)
		}},
	} {
		rec.take()
		for range 20 {
			require.NoError(t, k.run(), k.name)
		}
		calls, pipelining := rec.take()
		require.GreaterOrEqual(t, calls, 40, "%s: 20 cycles made %d calls through the Client's rueidis client", k.name, calls)
		assert.Empty(t, pipelining, "%s: calls under a cancellable context without a deadline (rueidis pipelines for good after one)", k.name)
	}
}
