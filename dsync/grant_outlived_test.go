package dsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A grant its waiter outlived is never returned (issue 25: a Semaphore
// waiter frozen by SIGSTOP past its lease returned, at the thaw, a live
// lock context beside another holder of all the permits). The freeze is
// emulated by holding the grant's message in a proxy in front of the
// waiter's Client: the release grants the lock to the waiter under a fixed
// 200 ms lease, the grant lapses unseen, another owner takes the lock, the
// waiter's fallback look (every lease/3 = 1 s) queues it again, and only
// then is the message delivered, as after a thaw whose timer fired first.
// The grant is older than the waiter's last look, which did not find it:
// it is gone, and the waiter must go on waiting. (Before the fix the wait
// dated a grant older than its last look from that look's send time, and
// returned the lapsed grant's token with a live lock context while the
// other owner held the lock.) The waiter then gets the lock from the other
// owner's release, with a newer token.
func TestOutlivedGrantNotReturned(t *testing.T) {
	const (
		clientLease = 3 * time.Second
		fixedLease  = 200 * time.Millisecond
	)
	for _, row := range fifoRows() {
		t.Run(row.name, func(t *testing.T) {
			ctx := ctxT(t)
			px, deliver := newPushHoldProxy(t, server(t).Addr, "outlived")
			rcw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rcw.Close)
			ca := newClient(t, dsync.WithLease(clientLease))
			cw := newClientOn(t, rcw, dsync.WithKeyPrefix(prefixOf(t, ca)), dsync.WithLease(clientLease))
			holder, waiter := row.probe(ca, "outlived"), row.open(cw, "outlived", dsync.WithLeaseTime(fixedLease))

			hctx, err := holder.lock(ctx)
			require.NoError(t, err)
			type result struct {
				lctx  context.Context
				err   error
				valid bool // the lock context was live when the call returned
			}
			got := make(chan result, 1)
			go func() {
				l, err := waiter.lock(ctx)
				got <- result{l, err, err == nil && l.Err() == nil}
			}()
			waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return waitersOf(t, ca, "outlived") == 1 })
			// A fresh look by the waiter (a script call on the lock's
			// keys, not a keepalive PING nor its SUBSCRIBE, after which
			// it looks again), then quiet: its next look is about
			// lease/3 = 1 s away, time enough for the grant to lapse
			// (200 ms) and the other owner to take the lock.
			mark := px.lastMark.Load()
			waitFor(t, 2*time.Second, "a look by the waiter", func() bool { return px.lastMark.Load() != mark })
			waitFor(t, 2*time.Second, "the waiter's look 20 ms past", func() bool {
				return time.Since(time.Unix(0, px.lastMark.Load())) >= 20*time.Millisecond
			})
			px.arm()
			require.NoError(t, holder.unlock(hctx))
			select {
			case <-px.held:
			case <-time.After(3 * time.Second):
				t.Fatal("no grant message pushed to the waiter's Client after the release")
			}
			// The grant lapses in Redis; the other owner takes the lock.
			var h2 context.Context
			waitFor(t, 2*time.Second, "the grant to lapse and the other owner to take the lock", func() bool {
				l, ok, err := holder.try(ctx)
				require.NoError(t, err)
				h2 = l
				return ok
			})
			tok2, _ := dsync.FencingToken(h2)
			// The waiter looks again and queues anew, its grant unseen. A
			// failure here says what the waiter did instead: returned (and
			// what), or not looked since the other owner took the lock.
			took, queued := time.Now(), false
			t.Cleanup(func() {
				if !queued {
					states, err := ca.Inspect(context.Background(), "outlived")
					t.Logf("the waiter did not queue again: its last look %v after the other owner took the lock; Inspect: %+v (err %v)",
						time.Unix(0, px.lastMark.Load()).Sub(took).Round(time.Millisecond), states, err)
				}
			})
			waitFor(t, 3*time.Second, "the waiter to queue again", func() bool {
				select {
				case r := <-got:
					tok, _ := dsync.FencingToken(r.lctx)
					t.Fatalf("the waiter returned before its grant's message came: err %v, lock context live %v, token %d (the other owner's %d)",
						r.err, r.valid, tok, tok2)
				default:
				}
				return waitersOf(t, ca, "outlived") == 1
			})
			queued = true
			select {
			case r := <-got:
				t.Fatalf("the waiter returned before its grant's message came (err %v)", r.err)
			default:
			}
			delivered := time.Now()
			deliver()
			// The waiter has read the message once it returned or looked
			// after it (the look that finds the grant gone).
			var early *result
			waitFor(t, 3*time.Second, "the waiter to act on the outlived grant", func() bool {
				select {
				case r := <-got:
					early = &r
					return true
				default:
				}
				return time.Unix(0, px.lastMark.Load()).After(delivered)
			})
			if early != nil {
				tok, _ := dsync.FencingToken(early.lctx)
				t.Fatalf("the waiter returned %v after its outlived grant's message came (err %v, lock context live %v, token %d) while another owner held the lock (token %d)",
					time.Since(delivered).Round(time.Millisecond), early.err, early.valid, tok, tok2)
			}
			require.NoError(t, h2.Err(), "the other owner's lock context")
			require.NoError(t, holder.unlock(h2))
			var r result
			select {
			case r = <-got:
			case <-time.After(3 * time.Second):
				t.Fatal("the waiter did not get the lock after the other owner's release")
			}
			require.NoError(t, r.err)
			require.True(t, r.valid, "the waiter's lock context was not live at return")
			tok, _ := dsync.FencingToken(r.lctx)
			require.Greater(t, tok, tok2, "the waiter's token: not from a grant after the other owner's hold")
			_ = waiter.unlock(r.lctx) // (its 200 ms lease may have lapsed on a loaded machine)
		})
	}
}
