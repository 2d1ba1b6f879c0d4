package dsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A grant's lease runs from the grant (issue 24, point 3). A waiter with a
// fixed lease (WithLeaseTime) on a Client whose lease makes it look again
// only every lease/3 is granted the lock by a release that comes long
// after its last attempt, longer than its whole fixed lease. The lock
// context it gets must be live, with the rest of the lease Redis gave the
// grant, and its lease clock must not end after Redis's. (Before the fix
// the lease clock ran from the last attempt's send time: the acquisition
// returned nil with its lock context already cancelled, cause ErrLockLost,
// while Redis held the grant for the full lease.) The Mutex, which does
// not grant (its waiter is woken and acquires with an attempt), is
// checked the same way.
func TestFixedLeaseGrantArrivesLive(t *testing.T) {
	const (
		tries = 100
		// The waiter's Client looks again every clientLease/3 = 1 s; the
		// holder releases releaseAfter after the waiter's attempt that
		// queued it, longer than the waiter's fixedLease: before its
		// next look, after its lease would have run out counted from
		// that attempt.
		clientLease  = 3 * time.Second
		fixedLease   = 200 * time.Millisecond
		releaseAfter = 500 * time.Millisecond
	)
	rows := map[string]bool{"Mutex": true, "FairMutex": true, "RWMutexWrite": true, "RWMutexRead": true, "Semaphore1": true}
	for _, row := range contractRows() {
		if !rows[row.name] {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			ctx := ctxT(t)
			rc := newRueidis(t)
			ca := newClient(t, dsync.WithLease(clientLease))
			prefix := prefixOf(t, ca)
			cb := newClientOn(t, newRueidis(t), dsync.WithKeyPrefix(prefix), dsync.WithLease(clientLease))
			var (
				mu                   sync.Mutex
				dead, errs, overlong int
				compared, unread     int // lease ends compared; holds read after both ended
				first                []string
				margin               = time.Hour // the least by which Redis's end came after the lock context's
			)
			note := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				errs++
				if len(first) < 5 {
					first = append(first, fmt.Sprintf(format, args...))
				}
			}
			var wg sync.WaitGroup
			for i := range tries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("g%d", i)
					holder, waiter := row.probe(ca, name), row.open(cb, name, dsync.WithLeaseTime(fixedLease))
					hctx, err := holder.lock(ctx)
					if err != nil {
						note("try %d: holder: %v", i, err)
						return
					}
					type result struct {
						lctx   context.Context
						dead   error // the lock context's cause as the acquisition returned
						err    error
						end    time.Time // the lock context's lease end (its Deadline)
						inRdb  time.Time // the hold's end in Redis (zero: gone when read)
						rdbNow time.Time // Redis's clock when it was read
						rdbErr error
					}
					got := make(chan result, 1)
					go func() {
						lctx, err := waiter.lock(ctx)
						r := result{lctx: lctx, err: err}
						if err == nil && lctx.Err() != nil {
							// Read at once: a fixed lease of 200 ms may
							// run out while this goroutine waits for a CPU
							// later (make test of e42b1e2, both CPUs
							// busy: 95 of 100 ended before the check).
							r.dead = context.Cause(lctx)
						}
						if err == nil {
							r.end, _ = lctx.Deadline()
							r.inRdb, r.rdbNow, r.rdbErr = redisLeaseEnd(ctx, rc, row.name, prefix, name, lctx)
						}
						got <- r
					}()
					if !waitGrantQueued(ctx, rc, row.name, prefix, name) {
						note("try %d: the waiter did not queue", i)
					}
					time.Sleep(releaseAfter) // the fault: the release comes after a whole fixed lease
					if err := holder.unlock(hctx); err != nil {
						note("try %d: holder's release: %v", i, err)
					}
					var r result
					select {
					case r = <-got:
					case <-time.After(5 * time.Second):
						r.err = fmt.Errorf("no grant within 5 s of the release")
					}
					mu.Lock()
					defer mu.Unlock()
					add := func(format string, args ...any) {
						if len(first) < 5 {
							first = append(first, fmt.Sprintf(format, args...))
						}
					}
					switch {
					case r.err != nil:
						errs++
						add("try %d: waiter: %v", i, r.err)
						return
					case r.dead != nil:
						dead++
						add("try %d: lock context cancelled on return (%v)", i, r.dead)
					case r.rdbErr != nil:
						errs++
						add("try %d: reading the lease in Redis: %v", i, r.rdbErr)
					case r.inRdb.IsZero() && r.end.After(r.rdbNow.Add(time.Millisecond)):
						// Gone from Redis at rdbNow, while the lock
						// context's lease still ran.
						overlong++
						add("try %d: the hold was gone from Redis %v before the lock context's lease end", i, r.end.Sub(r.rdbNow))
					case r.inRdb.IsZero():
						// Read after both leases ran out (a busy CPU
						// delayed this goroutine): nothing to compare.
						unread++
					case r.end.After(r.inRdb.Add(time.Millisecond)): // (Redis's end in whole ms)
						overlong++
						add("try %d: the lock context's lease ends %v after the hold's in Redis", i, r.end.Sub(r.inRdb))
					default:
						compared++
						margin = min(margin, r.inRdb.Sub(r.end))
					}
					_ = waiter.unlock(r.lctx)
				}()
			}
			wg.Wait()
			t.Logf("%s: %d/%d fixed-lease acquisitions returned with a cancelled lock context, %d lease clocks past Redis's (least margin %v, %d compared; %d read after both leases ended), %d errors", row.name, dead, tries, overlong, margin, compared, unread, errs)
			require.Zero(t, dead+overlong+errs, "first: %q", first)
			require.Positive(t, compared, "no lease end compared with Redis's")
		})
	}
}

// waitGrantQueued waits until the waiter for name is seen waiting in Redis.
func waitGrantQueued(ctx context.Context, rc rueidis.Client, kind, prefix, name string) bool {
	var cmd rueidis.Completed
	switch kind {
	case "Mutex":
		cmd = rc.B().Hlen().Key(prefix + ":{" + name + "}:mutex:waiting").Build()
	case "FairMutex":
		cmd = rc.B().Llen().Key(fairKeys(prefix, name)[1]).Build()
	case "RWMutexWrite":
		cmd = rc.B().Llen().Key(rwKeys(prefix, name)[2]).Build()
	case "RWMutexRead":
		cmd = rc.B().Zcard().Key(rwKeys(prefix, name)[4]).Build()
	case "Semaphore1":
		cmd = rc.B().Llen().Key(prefix + ":{" + name + "}:sem:waiters").Build()
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := rc.Do(ctx, cmd.Pin()).AsInt64()
		if err == nil && n > 0 {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// redisLeaseEnd reads when the hold of lctx ends in Redis (zero if it is
// gone) and Redis's clock then, the server's clock being the machine's own
// (the test's server runs here).
func redisLeaseEnd(ctx context.Context, rc rueidis.Client, kind, prefix, name string, lctx context.Context) (end, now time.Time, err error) {
	owner, _ := dsync.OwnerOf(lctx)
	var keys, args []string
	var read string // an expression: the hold's end in ms, or nil
	switch kind {
	case "Mutex":
		keys, read = []string{prefix + ":{" + name + "}:mutex"}, `redis.call('pexpiretime', KEYS[1])`
	case "FairMutex":
		keys, read = fairKeys(prefix, name)[:1], `redis.call('pexpiretime', KEYS[1])`
	case "RWMutexWrite":
		keys, read = rwKeys(prefix, name)[:1], `tonumber(redis.call('hget', KEYS[1], 'wexp'))`
	case "RWMutexRead":
		keys, args, read = rwKeys(prefix, name)[1:2], []string{owner}, `tonumber(redis.call('zscore', KEYS[1], ARGV[1]))`
	case "Semaphore1":
		keys, read = []string{prefix + ":{" + name + "}:sem:holders"}, `tonumber(redis.call('zrange', KEYS[1], -1, -1, 'withscores')[2] or '-2')`
	}
	// With Redis's clock: a hold gone (expired) when read is compared
	// with the time it was read.
	script := `local e = ` + read + ` or -2
local t = redis.call('time')
return {e, t[1] * 1000 + math.floor(t[2] / 1000)}`
	vs, err := rc.Do(ctx, rc.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsIntSlice()
	if err != nil {
		return end, now, err
	}
	switch {
	case vs[0] == -1:
		return end, now, fmt.Errorf("the hold's key has no expiry")
	case vs[0] >= 0:
		end = time.UnixMilli(vs[0])
	}
	return end, time.UnixMilli(vs[1]), nil
}
