package dsync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lossTolerance: a successful renewal reply that arrived this long before
// a hold's lease clock ran out, and would have moved it on, must have
// moved it on (the gap between reading a reply and applying it is a few
// statements).
const lossTolerance = 50 * time.Millisecond

// Holds passed inside one Client for seconds, with a 300 ms lease and
// blocks of 100,000 tokens, all live on one Redis hold: a renewal whose
// reply arrives after a local handoff must reach the hold that is live
// then. It used to be dropped with the ended hold, so 3-6 holders per 3 s
// were cancelled with ErrLockLost while Redis held the lock.
//
// Every successful renewal must have moved on the lease clock of the hold
// that is live once its reply is applied (misapplied). A hold may still be
// lost rightly: on a loaded machine a renewal round can come so late that
// the lease clock, counted from the last renewal's send time, runs out
// first, or Redis expires the key first. So a loss counts as a bug when
// its lease clock ran out at a deadline that a successful renewal of its
// Redis hold, received at least lossTolerance before, should have moved on
// (a reply dropped or applied to another hold), or when a renewal found it
// gone before Redis could have expired it (a lease after the send time of
// its last confirmation). A late round is still a round: after each
// rightful loss a renewal must succeed again, so that a renewal loop that
// stopped does not pass for a late one. (A local handoff also needs a
// confirmation younger than lease/30, so the handoff script refreshes the
// lease clock too, and losses are rarer than the renewal path alone
// would make them.)
func TestMutexNoLossUnderLocalHandoffs(t *testing.T) {
	s := redistest.Start(t)
	const lease = 300 * time.Millisecond
	type reply struct{ sent, at time.Time }
	var (
		mu         sync.Mutex
		replies    = map[uint64][]reply{} // successful renewals by the Redis hold's last token
		gone       = map[uint64]reply{}   // the first renewal that found a Redis hold gone
		lastSent   time.Time              // of the last successful renewal
		renewed    int
		misapplied int
	)
	hook := func(h *hold, ok bool, sentAt time.Time) {
		at := time.Now()
		if !ok {
			mu.Lock()
			if _, seen := gone[h.rToken]; !seen {
				gone[h.rToken] = reply{sentAt, at}
			}
			mu.Unlock()
			return
		}
		// The hold live now carries the reply (handOff passes the lease
		// clock on), unless the chain has ended. One just handed over
		// whose clock has not started (trackUntil) takes over its
		// predecessor's end, as handOff read it.
		h.mu.Lock()
		handed := h.deadline
		for h.succ != nil {
			next := h.succ
			handed = h.deadline
			h.mu.Unlock()
			h = next
			h.mu.Lock()
		}
		end := h.deadline
		if end.IsZero() {
			end = handed
		}
		bad := !h.ended && !h.expiring && end.Before(sentAt.Add(validity(lease)))
		h.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		replies[h.rToken] = append(replies[h.rToken], reply{sentAt, at})
		lastSent = later(lastSent, sentAt)
		renewed++
		if bad {
			misapplied++
		}
	}
	c, err := NewClient(s.Client(t), WithLease(lease), WithMaxLocalHandoffs(100000), WithLogger(quiet), withRenewReplied(hook))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	m := c.NewMutex("long")
	// A probe of the machine's load: how late a goroutine of this process
	// that sleeps 5 ms at a time wakes, over the run.
	type wake struct {
		at   time.Time
		late time.Duration
	}
	var wakes []wake
	probeDone := make(chan struct{})
	stopProbe := make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			select {
			case <-stopProbe:
				return
			default:
			}
			want := time.Now().Add(5 * time.Millisecond)
			time.Sleep(5 * time.Millisecond)
			at := time.Now()
			wakes = append(wakes, wake{at, at.Sub(want)})
		}
	}()
	var wg sync.WaitGroup
	var lost []*hold
	n := 0
	end := time.Now().Add(3 * time.Second)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				lctx, err := m.LockContext(ctx)
				if !assert.NoError(t, err) {
					return
				}
				time.Sleep(50 * time.Microsecond) // the holder's work
				gone := lctx.Err() != nil
				if err := m.UnlockContext(lctx); !gone {
					assert.NoError(t, err)
				}
				mu.Lock()
				n++
				if gone {
					lost = append(lost, lctx.(*lockCtx).h)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopProbe)
	<-probeDone
	// The renewal loop is alive: a renewal sent after the run succeeds.
	var after time.Time
	for _, h := range lost {
		h.mu.Lock()
		after = later(after, h.deadline)
		h.mu.Unlock()
	}
	after = later(after, time.Now())
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	waitUntil(t, 10*lease, "a successful renewal after the run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastSent.After(after)
	})
	require.NoError(t, m.UnlockContext(lctx))
	require.NoError(t, c.Close()) // no renewal replies after this
	// stalled is the probe's worst lateness in the validity before t.
	stalled := func(t time.Time) time.Duration {
		var worst time.Duration
		for _, w := range wakes {
			if w.at.After(t.Add(-validity(lease))) && !w.at.After(t.Add(lossTolerance)) {
				worst = max(worst, w.late)
			}
		}
		return worst
	}
	mu.Lock()
	defer mu.Unlock()
	bugs := 0
	for _, h := range lost {
		h.mu.Lock()
		expiring, deadline := h.expiring, h.deadline
		h.mu.Unlock()
		if !expiring {
			// Redis expires the key a lease after it processed the last
			// confirmation, which was sent at deadline - validity.
			g, ok := gone[h.rToken]
			expiry := deadline.Add(-validity(lease)).Add(lease)
			if !ok || g.at.Before(expiry) {
				bugs++
				t.Logf("hold with token %d: a renewal found it gone %v before Redis could have expired it (found: %v)", h.token, expiry.Sub(g.at), ok)
				continue
			}
			t.Logf("hold with token %d: a renewal sent %v after its last confirmation found it gone: Redis expired it (this process's 5 ms sleeper woke up to %v late then)",
				h.token, g.sent.Sub(deadline.Add(-validity(lease))).Round(time.Millisecond), stalled(g.at).Round(time.Millisecond))
			continue
		}
		var last time.Time // the last successful renewal received before the deadline
		missed := false
		for _, r := range replies[h.rToken] {
			if r.at.Before(deadline) && r.at.After(last) {
				last = r.at
			}
			if r.at.Before(deadline.Add(-lossTolerance)) && r.sent.Add(validity(lease)).After(deadline) {
				missed = true
				t.Logf("hold with token %d: lease clock ran out at %v, but a renewal sent at %v was received %v before it (it ran to %v)",
					h.token, deadline.Format("15:04:05.000"), r.sent.Format("15:04:05.000"), deadline.Sub(r.at), r.sent.Add(validity(lease)).Format("15:04:05.000"))
			}
		}
		if missed {
			bugs++
			continue
		}
		if last.IsZero() {
			last = deadline.Add(-validity(lease)) // since the acquisition, at the latest
		}
		t.Logf("hold with token %d: lease clock ran out, no renewal received in time (the last ≥ %v before the deadline: a late round; this process's 5 ms sleeper woke up to %v late then)",
			h.token, deadline.Sub(last).Round(time.Millisecond), stalled(deadline).Round(time.Millisecond))
	}
	t.Logf("%d acquisitions, %d lost (%d of them bugs); %d successful renewals, %d not carried by the live hold", n, len(lost), bugs, renewed, misapplied)
	require.Zero(t, misapplied, "successful renewals whose reply did not move the live hold's lease clock")
	require.Zero(t, bugs, "%d of %d holders lost the lock with Redis healthy and a renewal received in time", bugs, n)
}
