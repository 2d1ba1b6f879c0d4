package dsync

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quiet discards the Client's log (a lost hold logs a warning).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// attemptLog records, per fencing token, how many acquire scripts the
// acquisition that got it sent to Redis (0: it was handed the lock).
type attemptLog struct {
	mu sync.Mutex
	n  map[uint64]int
}

func (l *attemptLog) observer() Observer {
	l.n = map[uint64]int{}
	return Observer{AcquireDone: func(_ context.Context, e AcquireDone) {
		if e.Acquired && !e.Reentered {
			l.mu.Lock()
			l.n[e.Token] = e.Attempts
			l.mu.Unlock()
		}
	}}
}

func (l *attemptLog) attempts(tok uint64) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.n[tok]
	return n, ok
}

// A hold whose lock is gone from Redis when it is passed on ends as lost
// (lock-context cause ErrLockLost; UnlockContext returns ErrNotHeld), not
// as released, and the next local waiter acquires through Redis, with a
// token above every earlier one. Each way a hold is passed on: the handoff
// script, a handoff from the reserved block (no round trip) of a hold a
// renewal found gone while it was being released or whose last
// confirmation in Redis is older than lease/30 (it goes through the
// handoff script, which finds the lock gone), and the release.
func TestMutexPassOnFindsLockGone(t *testing.T) {
	s := redistest.Start(t)
	for _, tc := range []struct {
		name     string
		handoffs int
		waiter   bool // a local waiter is queued at the release
		local    bool // the hold to pass on came by a handoff with a block
		stale    bool // wait until its last confirmation is lease/30 old
	}{
		{"handoff script", 1, true, false, false},
		{"local handoff of a hold found gone", 100, true, true, false},
		{"local handoff of a hold unconfirmed for lease/30", 100, true, true, true},
		{"release", 1, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log attemptLog
			lease := 3 * time.Second
			if tc.stale {
				// Renewals every lease/3 = 5 s; lease/30 = 500 ms: a
				// renewal, which would find the key gone first, is 4.5 s
				// away when the hold turns stale (with a 3 s lease it was
				// 0.9 s, and a make test with both CPUs busy met it).
				lease = 15 * time.Second
			}
			c, err := NewClient(s.Client(t), WithMaxLocalHandoffs(tc.handoffs), WithLease(lease), WithObserver(log.observer()), WithLogger(quiet))
			require.NoError(t, err)
			defer c.Close()
			m := c.NewMutex("gone " + tc.name)
			ctx := context.Background()
			got := make(chan context.Context, 1)
			lockAsync := func() {
				go func() {
					l, err := m.LockContext(ctx)
					if assert.NoError(t, err) {
						got <- l
					}
				}()
				waitUntil(t, 5*time.Second, "a local waiter", func() bool { return queued(c, m.key) == 1 })
			}
			held, err := m.LockContext(ctx)
			require.NoError(t, err)
			maxTok, _ := FencingToken(held)
			if tc.local {
				// Through Redis (the first acquisition reserved no block)
				// to a waiter, reserving a block: its successor's handoff
				// is local.
				lockAsync()
				require.NoError(t, m.UnlockContext(held))
				held = <-got
				tok, _ := FencingToken(held)
				require.Greater(t, tok, maxTok)
				maxTok = tok
			}
			if tc.waiter {
				lockAsync()
			}
			// The check of every hold that follows the control
			// subscription's confirmation is behind us: made after the
			// DEL, it ends the hold as lost (a make test with both CPUs
			// busy met it: "found gone ... when this Client's control
			// subscription came up").
			waitUntil(t, 5*time.Second, "the control subscription live and its check of the holds done", func() bool {
				return ForceSubscribed(c)
			})
			h := held.(*lockCtx).h
			if tc.local && !tc.stale {
				// Begun before the DEL: a real renewal that finds the key
				// gone finds the release begun, as the simulated one below.
				h.beginRelease()
			}
			require.NoError(t, s.Do(t, "DEL", m.key).Error())
			if tc.stale {
				waitUntil(t, 2*time.Second, "lease/30 since the hold was confirmed", func() bool { return !h.confirmedWithin(c.cfg.lease) })
				require.NoError(t, held.Err(), "cause: %v", context.Cause(held))
			} else if tc.local {
				// A renewal in flight when the release began finds the
				// lock gone: the release is told (renewReply).
				h.renewReply(false, time.Now(), c.cfg.lease, whyGone)
				require.NoError(t, held.Err(), "a hold being released was ended by the renewal (cause: %v)", context.Cause(held))
			}
			require.ErrorIs(t, m.UnlockContext(held), ErrNotHeld, "release of a hold whose lock is gone")
			require.ErrorIs(t, context.Cause(held), ErrLockLost, "cause of the lost hold's lock context")
			if !tc.waiter {
				return
			}
			next := <-got
			tok, _ := FencingToken(next)
			require.Greater(t, tok, maxTok, "token of the waiter after the loss")
			n, ok := log.attempts(tok)
			require.True(t, ok, "no AcquireDone for token %d", tok)
			require.GreaterOrEqual(t, n, 1, "the waiter after the loss was handed the lock instead of acquiring it in Redis")
			require.NoError(t, next.Err())
			require.NoError(t, m.UnlockContext(next))
		})
	}
}

// Goroutines pass a Mutex through the handoff script (a block of one
// token: every pass goes through Redis) while holders delete its key from
// time to time: each such holder's lock context ends with ErrLockLost,
// and the grant after it is an acquisition in Redis with a token above
// every earlier one.
func TestMutexHandoffsWithKeyDeleted(t *testing.T) {
	s := redistest.Start(t)
	var log attemptLog
	c, err := NewClient(s.Client(t), WithMaxLocalHandoffs(1), WithObserver(log.observer()), WithLogger(quiet))
	require.NoError(t, err)
	defer c.Close()
	m := c.NewMutex("del")
	type grant struct {
		tok     uint64
		deleted bool // its holder deleted the key
		queued  int  // local waiters when it deleted it
	}
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
	)
	ctx := context.Background()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				lctx, err := m.LockContext(ctx)
				if !assert.NoError(t, err) {
					return
				}
				tok, _ := FencingToken(lctx)
				gr := grant{tok: tok, deleted: (i+g)%7 == 3}
				if gr.deleted {
					gr.queued = queued(c, m.key)
					assert.NoError(t, s.Do(t, "DEL", m.key).Error())
				}
				mu.Lock()
				grants = append(grants, gr)
				mu.Unlock()
				err = m.UnlockContext(lctx)
				if gr.deleted {
					assert.ErrorIs(t, err, ErrNotHeld, "release after the key was deleted")
					assert.ErrorIs(t, context.Cause(lctx), ErrLockLost, "cause after the key was deleted (token %d)", tok)
				} else {
					assert.NoError(t, err)
				}
			}
		}()
	}
	wg.Wait()
	var maxTok uint64
	deleted, handedOff := 0, 0
	for i, g := range grants {
		require.Greater(t, g.tok, maxTok, "grant %d: token not above every earlier one", i)
		maxTok = g.tok
		if i == 0 || !grants[i-1].deleted {
			continue
		}
		deleted++
		if grants[i-1].queued > 0 {
			handedOff++
		}
		n, ok := log.attempts(g.tok)
		require.True(t, ok, "no AcquireDone for token %d", g.tok)
		require.GreaterOrEqual(t, n, 1, "grant %d after a deleted key: handed over, not acquired in Redis", i)
	}
	t.Logf("%d grants, %d after a deleted key (%d with a local waiter queued at the delete)", len(grants), deleted, handedOff)
	require.Greater(t, handedOff, 10, "too few deletes met a queued waiter to test the handoff path")
}
