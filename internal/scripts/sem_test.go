package scripts_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func semInts(t *testing.T, r rueidis.RedisResult) []int64 {
	t.Helper()
	v, err := r.AsIntSlice()
	require.NoError(t, err)
	return v
}

var semKeys = []string{"p:{s}:sem", "p:{s}:sem:holders", "p:{s}:sem:waiters", "p:{s}:sem:want", "p:{s}:sem:undone"}

const semCh = "p:{s}:sem:w:"

func semAcq(t *testing.T, rc rueidis.Client, owner, waiter string, n, size int, lease string, mode string) []int64 {
	t.Helper()
	return semInts(t, scripts.SemAcquire.Exec(context.Background(), rc, semKeys,
		[]string{owner, waiter, strconv.Itoa(n), strconv.Itoa(size), lease, mode, semCh, "10000"}))
}

func semRel(t *testing.T, rc rueidis.Client, owner string, n int) []int64 {
	t.Helper()
	return semInts(t, scripts.SemRelease.Exec(context.Background(), rc, semKeys, []string{owner, strconv.Itoa(n), semCh, "4"}))
}

// TestSemaphoreScripts drives the semaphore scripts directly: grants, FIFO
// reservation, size mismatch, over-release, renewal, expiry pruning,
// cancellation and targeted wakeups.
func TestSemaphoreScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	queued := func() int64 {
		n, err := rc.Do(ctx, rc.B().Llen().Key(semKeys[2]).Build()).AsInt64()
		require.NoError(t, err)
		m, err := rc.Do(ctx, rc.B().Hlen().Key(semKeys[3]).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, n, m, "queue entries and their records")
		return n
	}

	// Woken waiters: subscribe to every waiter channel.
	woken := make(chan string, 16)
	dc, cancel := rc.Dedicate()
	defer cancel()
	// A grant to waiter "<client>.<n>" is "<n> <token>" on the client's
	// channel.
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		n, _, _ := strings.Cut(m.Message, " ")
		woken <- m.Channel[len(semCh):] + "." + n
	}})
	require.NoError(t, dc.Do(ctx, dc.B().Psubscribe().Pattern("p:{s}:sem:w:*").Build()).Error())
	defer func() { dc.Close(); <-wait }()
	expectWoken := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-woken:
				require.Equal(t, w, got, "woke")
			case <-time.After(2 * time.Second):
				t.Fatalf("%q not woken", w)
			}
		}
		select {
		case got := <-woken:
			t.Fatalf("woke %q too", got)
		case <-time.After(50 * time.Millisecond):
		}
	}

	before := time.Now().UnixMicro()
	a := semAcq(t, rc, "A", "a.1", 3, 4, "10000", "wait")
	require.Equal(t, int64(1), a[0], "acquire = %v", a)
	require.GreaterOrEqual(t, a[1], before, "acquire = %v", a)
	r := semAcq(t, rc, "X", "x.1", 1, 5, "10000", "try")
	require.Equal(t, int64(-1), r[0], "other size = %v, want {-1, 4}", r)
	require.Equal(t, int64(4), r[1], "other size = %v, want {-1, 4}", r)
	// B wants 3 of the 1 free: queued. C wants 1, which is free, but B is
	// ahead and reserves it.
	r = semAcq(t, rc, "B", "b.1", 3, 4, "10000", "wait")
	require.Equal(t, int64(0), r[0], "B = %v, want {0, hint}", r)
	require.Greater(t, r[1], int64(0), "B = %v, want {0, hint}", r)
	r = semAcq(t, rc, "C", "c.1", 1, 4, "10000", "try")
	require.Equal(t, int64(0), r[0], "C try overtook B: %v", r)
	r = semAcq(t, rc, "C", "c.1", 1, 4, "10000", "wait")
	require.Equal(t, int64(0), r[0], "C overtook B: %v", r)
	require.Equal(t, int64(2), queued(), "queue entries (try must not queue)")
	// A release through another size is refused like an acquire, and
	// changes nothing.
	r = semInts(t, scripts.SemRelease.Exec(ctx, rc, semKeys, []string{"A", "1", semCh, "5"}))
	require.Equal(t, int64(-1), r[0], "release with size 5 = %v, want [-1 4]", r)
	require.Equal(t, int64(4), r[1], "release with size 5 = %v, want [-1 4]", r)
	// Over-release changes nothing.
	r = semRel(t, rc, "A", 4)
	require.Equal(t, int64(0), r[0], "over-release = %v, want {0, 3}", r)
	require.Equal(t, int64(3), r[1], "over-release = %v, want {0, 3}", r)
	r = semRel(t, rc, "Z", 1)
	require.Equal(t, int64(0), r[0], "release by a stranger = %v", r)
	require.Equal(t, int64(0), r[1], "release by a stranger = %v", r)
	expectWoken()
	// Releasing 1 of A's 3: 2 free, B (3) still does not fit; nobody woken.
	r = semRel(t, rc, "A", 1)
	require.Equal(t, int64(1), r[0], "partial release = %v, want {1, 2}", r)
	require.Equal(t, int64(2), r[1], "partial release = %v, want {1, 2}", r)
	expectWoken()
	// The partial release renamed A's acquisition (its member names its
	// permits): its renewal, by the name it was granted under, finds it.
	memberA := "A " + strconv.FormatInt(a[1], 10) + " a.1 3"
	n, _ := scripts.SemRenew.Exec(ctx, rc, semKeys, []string{memberA, "10000", semCh}).AsInt64()
	require.Equal(t, int64(1), n, "renew A after a partial release")
	require.Equal(t, []string{"A " + strconv.FormatInt(a[1], 10) + " a.1 2"}, semHolders(t, rc), "holders after a partial release")
	// Releasing the rest: B and C both fit, and the release grants them
	// their permits, in queue order, and tells each.
	r = semRel(t, rc, "A", 2)
	require.Equal(t, int64(1), r[0], "release = %v", r)
	require.Equal(t, int64(0), r[1], "release = %v", r)
	expectWoken("b.1", "c.1")
	require.Equal(t, int64(0), queued(), "queue entries after the grants")
	// A grantee that missed its message finds its grant at its next
	// attempt (C first here), with its token: B's first, then C's.
	c := semAcq(t, rc, "C", "c.1", 1, 4, "10000", "wait")
	b := semAcq(t, rc, "B", "b.1", 3, 4, "10000", "wait")
	require.Equal(t, int64(1), c[0], "C = %v, B = %v", c, b)
	require.Equal(t, int64(1), b[0], "C = %v, B = %v", c, b)
	require.Greater(t, b[1], a[1], "C = %v, B = %v", c, b)
	require.Greater(t, c[1], b[1], "C = %v, B = %v", c, b)
	r = semAcq(t, rc, "X", "x.2", 1, 4, "10000", "try")
	require.Equal(t, int64(0), r[0], "the grants' permits were handed out again: %v", r)
	// Full: D queues; cancelling removes it at once.
	r = semAcq(t, rc, "D", "d.1", 1, 4, "10000", "wait")
	require.Equal(t, int64(0), r[0], "D = %v", r)
	n, _ = scripts.SemUndo.Exec(ctx, rc, semKeys, []string{"d.1", semCh, "10000"}).AsInt64()
	require.Equal(t, int64(0), n, "undo of a queued waiter, want 0 (nothing granted)")
	require.Equal(t, int64(0), queued(), "cancelled waiter left in the queue")
	// An acquire of the undone call that arrives late does nothing.
	semRel(t, rc, "C", 1)
	r = semAcq(t, rc, "D", "d.1", 1, 4, "10000", "wait")
	require.Equal(t, int64(0), r[0], "late acquire of an undone call = %v, want a no-op", r)
	require.Equal(t, int64(0), queued(), "late acquire of an undone call queued")
	r = semAcq(t, rc, "C", "c.2", 1, 4, "10000", "wait")
	require.Equal(t, int64(1), r[0], "C again = %v", r)
	// Renewal works for a holder's acquisition and not for a stranger's.
	memberB := "B " + strconv.FormatInt(b[1], 10) + " b.1 3"
	n, _ = scripts.SemRenew.Exec(ctx, rc, semKeys, []string{memberB, "10000", semCh}).AsInt64()
	require.Equal(t, int64(1), n, "renew B")
	n, _ = scripts.SemRenew.Exec(ctx, rc, semKeys, []string{"Z 1 wz 1", "10000", semCh}).AsInt64()
	require.Equal(t, int64(0), n, "renew stranger")
	semRel(t, rc, "B", 3)
	semRel(t, rc, "C", 1)

	// Expiry: E holds all 4 for 50ms and dies; F (queued) is woken by the
	// next script after the lease, and E's renewal fails.
	e := semAcq(t, rc, "E", "e.1", 4, 4, "50", "wait")
	require.Equal(t, int64(1), e[0], "E = %v", e)
	f := semAcq(t, rc, "F", "f.1", 2, 4, "10000", "wait")
	require.Equal(t, int64(0), f[0], "F = %v, want queued with a hint <= 51ms", f)
	require.LessOrEqual(t, f[1], int64(51), "F = %v, want queued with a hint <= 51ms", f)
	time.Sleep(60 * time.Millisecond) // the injected fault: E's lease lapses
	memberE := "E " + strconv.FormatInt(e[1], 10) + " e.1 4"
	n, _ = scripts.SemRenew.Exec(ctx, rc, semKeys, []string{memberE, "10000", semCh}).AsInt64()
	require.Equal(t, int64(0), n, "renew after expiry")
	expectWoken("f.1") // granted by the renewal's prune
	r = semAcq(t, rc, "F", "f.1", 2, 4, "10000", "wait")
	require.Equal(t, int64(1), r[0], "F after E's expiry = %v", r)
	// Every key carries an expiry, so an abandoned semaphore goes away.
	for _, k := range semKeys[:2] {
		ttl, _ := rc.Do(ctx, rc.B().Pttl().Key(k).Build()).AsInt64()
		require.Greater(t, ttl, int64(0), "%s has pttl", k)
	}
}

// Each acquisition has its own lease: a second acquisition by the same
// owner with a short lease never shortens the first (it used to overwrite
// the owner's expiry, so both permits lapsed with the short lease while the
// first acquisition was live: a double grant). The undo of a granted call
// gives back exactly its permits.
func TestSemaphorePerAcquisitionLease(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	first := semAcq(t, rc, "A", "w1", 1, 2, "10000", "wait")
	second := semAcq(t, rc, "A", "w2", 1, 2, "50", "wait")
	require.Equal(t, int64(1), first[0], "acquisitions %v %v", first, second)
	require.Equal(t, int64(1), second[0], "acquisitions %v %v", first, second)
	time.Sleep(60 * time.Millisecond) // the injected fault: the short lease lapses
	// Only the second acquisition lapsed: one permit is free, not two.
	r := semAcq(t, rc, "B", "w3", 2, 2, "10000", "try")
	require.Equal(t, int64(0), r[0], "another owner got both permits while A's first acquisition lives: %v", r)
	r = semAcq(t, rc, "B", "w4", 1, 2, "10000", "try")
	require.Equal(t, int64(1), r[0], "the lapsed permit did not come back: %v", r)
	// The undo of B's call w4 gives back its permit and nothing of A's.
	n, _ := scripts.SemUndo.Exec(ctx, rc, semKeys, []string{"w4", semCh, "10000"}).AsInt64()
	require.Equal(t, int64(1), n, "undo of a granted call")
	r = semInts(t, scripts.SemRelease.Exec(ctx, rc, semKeys, []string{"A", "1", semCh, "2", "0"}))
	require.Equal(t, int64(1), r[0], "A's release after B's undo = %v, want {1, 0}", r)
	require.Equal(t, int64(0), r[1], "A's release after B's undo = %v, want {1, 0}", r)
	require.Empty(t, semHolders(t, rc), "acquisitions left")
}

// semHolders returns the acquisitions in the holders zset.
func semHolders(t *testing.T, rc rueidis.Client) []string {
	t.Helper()
	all, err := rc.Do(context.Background(), rc.B().Zrange().Key(semKeys[1]).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(t, err)
	return all
}

// TestOnceScripts drives the Once scripts: begin, contention, failure,
// success, idempotent end (a retried end is told it recorded), the end of
// a superseded run, and renewal.
func TestOnceScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	keys := []string{"p:{o}:once", "p:{o}:once:run", "p:{o}:once:run:undone"}
	endKeys := []string{keys[0], keys[1], "p:{o}:once:ch"}
	calls := 0
	lastCall := ""
	// begin starts a Do call of owner; lastCall is its call id.
	begin := func(owner string) []rueidis.RedisMessage {
		calls++
		lastCall = "call" + strconv.Itoa(calls)
		r, err := scripts.OnceBegin.Exec(ctx, rc, keys, []string{owner, "10000", lastCall}).ToArray()
		require.NoError(t, err)
		return r
	}
	code := func(r []rueidis.RedisMessage, i int) int64 {
		v, err := r[i].AsInt64()
		require.NoError(t, err)
		return v
	}
	end := func(marker, outcome, val string) []rueidis.RedisMessage {
		r, err := scripts.OnceEnd.Exec(ctx, rc, endKeys, []string{marker, outcome, val}).ToArray()
		require.NoError(t, err)
		return r
	}
	r := begin("A")
	require.Equal(t, int64(1), code(r, 0), "begin A = %v", r)
	markA := "A " + strconv.FormatInt(code(r, 1), 10) + " " + lastCall
	rb := begin("B")
	require.Equal(t, int64(0), code(rb, 0), "begin B while A runs = %v", rb)
	require.Greater(t, code(rb, 1), int64(0), "begin B while A runs = %v", rb)
	// The same owner again (a concurrent call, not one inside f) waits too.
	ra := begin("A")
	require.Equal(t, int64(0), code(ra, 0), "begin A again while A runs = %v", ra)
	require.Greater(t, code(ra, 1), int64(0), "begin A again while A runs = %v", ra)
	v, _ := scripts.OnceRenew.Exec(ctx, rc, keys[1:], []string{markA, "10000"}).AsInt64()
	require.Equal(t, int64(1), v, "renew")
	rf := end(markA, "fail", "")
	require.Equal(t, int64(1), code(rf, 0), "fail = %v", rf)
	v, _ = scripts.OnceRenew.Exec(ctx, rc, keys[1:], []string{markA, "10000"}).AsInt64()
	require.Equal(t, int64(0), v, "renew after end")
	tokA := code(r, 1)
	r = begin("B")
	tokB := code(r, 1)
	require.Equal(t, int64(1), code(r, 0), "begin B = %v", r)
	require.Greater(t, tokB, tokA, "begin B = %v", r)
	markB := "B " + strconv.FormatInt(tokB, 10) + " " + lastCall
	// A stale end by A changes nothing.
	r = end(markA, "ok", `"stale"`)
	require.Equal(t, int64(0), code(r, 0), "stale end = %v", r)
	r = end(markB, "ok", `"v"`)
	require.Equal(t, int64(1), code(r, 0), "ok = %v", r)
	// Retried end (its first reply lost): recorded, by this run.
	r = end(markB, "ok", `"v"`)
	require.Equal(t, int64(1), code(r, 0), "retried ok = %v", r)
	// An end of a run superseded by one that succeeded: done by another.
	r = end(markA, "ok", `"stale"`)
	require.Equal(t, int64(2), code(r, 0), "end of a superseded run after another's success = %v", r)
	stale, _ := r[1].ToString()
	require.Equal(t, `"v"`, stale, "the value reported to a superseded run")
	r = begin("C")
	require.Equal(t, int64(2), code(r, 0), "begin after done = %v", r)
	stored, _ := r[1].ToString()
	require.Equal(t, `"v"`, stored, "stored value")
}

// TestOnceUndo: the undo of a Do call ends exactly its run, and makes a
// begin of that call arriving later a no-op.
func TestOnceUndo(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	keys := []string{"p:{u}:once", "p:{u}:once:run", "p:{u}:once:run:undone"}
	undoKeys := []string{keys[0], keys[1], keys[2], "p:{u}:once:ch"}
	begin := func(owner, call string) int64 {
		v, err := scripts.OnceBegin.Exec(ctx, rc, keys, []string{owner, "10000", call}).AsIntSlice()
		require.NoError(t, err)
		return v[0]
	}
	undo := func(call string) int64 {
		n, err := scripts.OnceUndo.Exec(ctx, rc, undoKeys, []string{call, "10000"}).AsInt64()
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(1), begin("O", "c1"), "begin c1")
	require.Equal(t, int64(0), undo("c2"), "the undo of another call ended c1's run")
	require.Equal(t, int64(0), begin("O", "c3"), "begin while c1 runs")
	require.Equal(t, int64(1), undo("c1"), "the undo of c1 did not end its run")
	require.Equal(t, int64(0), begin("O", "c1"), "a late begin of the undone c1")
	require.Equal(t, int64(1), begin("P", "c4"), "begin after the undo")
}

// TestWaitGroupScript: counting, zero deletes the keys, negative refused,
// exact int64 arithmetic, a generation per stretch above zero.
func TestWaitGroupScript(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	keys := []string{"p:{w}:wg", "p:{w}:wg:ch", "p:{w}:wg:gen"}
	add64 := func(d int64) []int64 {
		return semInts(t, scripts.WaitGroupAdd.Exec(ctx, rc, keys, []string{strconv.FormatInt(d, 10)}))
	}
	add := func(d int) []int64 { return add64(int64(d)) }
	gen := func() string {
		v, err := rc.Do(ctx, rc.B().Get().Key(keys[2]).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return ""
		}
		require.NoError(t, err)
		return v
	}
	r := add(2)
	require.Equal(t, int64(1), r[0], "add 2 = %v", r)
	require.Equal(t, int64(2), r[1], "add 2 = %v", r)
	g1 := gen()
	require.NotEqual(t, "", g1, "no generation while the counter is above zero")
	r = add(-3)
	require.Equal(t, int64(0), r[0], "add -3 = %v, want refused at 2", r)
	require.Equal(t, int64(2), r[1], "add -3 = %v, want refused at 2", r)
	r = add(-1)
	require.Equal(t, int64(1), r[0], "add -1 = %v", r)
	require.Equal(t, int64(1), r[1], "add -1 = %v", r)
	r = add(-1)
	require.Equal(t, int64(1), r[0], "add -1 = %v", r)
	require.Equal(t, int64(0), r[1], "add -1 = %v", r)
	n, _ := rc.Do(ctx, rc.B().Exists().Key(keys[0]).Key(keys[2]).Build()).AsInt64()
	require.Equal(t, int64(0), n, "counter or generation key left at zero")
	r = add(-1)
	require.Equal(t, int64(0), r[0], "add -1 at zero = %v", r)
	require.Equal(t, int64(0), r[1], "add -1 at zero = %v", r)
	// Leaving zero again starts a new generation.
	r = add(1)
	require.Equal(t, int64(1), r[0], "add 1 = %v", r)
	require.Equal(t, int64(1), r[1], "add 1 = %v", r)
	g2 := gen()
	require.NotEqual(t, "", g2, "generation after a zero crossing")
	require.NotEqual(t, g1, g2, "generation after a zero crossing")
	// Exact past 2^53 (a Lua double would lose the 1), and a clear refusal
	// past int64, leaving the counter as it was.
	r = add64(1 << 53)
	require.Equal(t, int64(1), r[0], "add 2^53 = %v, want %d", r, int64(1<<53+1))
	require.Equal(t, int64(1<<53+1), r[1], "add 2^53 = %v, want %d", r, int64(1<<53+1))
	r = add(1)
	require.Equal(t, int64(1), r[0], "add 1 = %v, want %d", r, int64(1<<53+2))
	require.Equal(t, int64(1<<53+2), r[1], "add 1 = %v, want %d", r, int64(1<<53+2))
	r = add64(math.MaxInt64)
	require.Equal(t, int64(-1), r[0], "add MaxInt64 = %v, want refused at %d", r, int64(1<<53+2))
	require.Equal(t, int64(1<<53+2), r[1], "add MaxInt64 = %v, want refused at %d", r, int64(1<<53+2))
	r = add64(-(1<<53 + 2))
	require.Equal(t, int64(1), r[0], "add -(2^53+2) = %v, want 0", r)
	require.Equal(t, int64(0), r[1], "add -(2^53+2) = %v, want 0", r)
}

// TestSemaphorePruneAfterShortLease: a holder with a short lease taken
// after one with a long lease: the acquire that finds both permits held
// says to look again when the short lease ends (not the long one), and
// then gets the permit back.
func TestSemaphorePruneAfterShortLease(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	require.Equal(t, int64(1), semAcq(t, rc, "long", "c.1", 1, 2, "3600000", "wait")[0])
	require.Equal(t, int64(1), semAcq(t, rc, "short", "c.2", 1, 2, "50", "wait")[0])
	got := semAcq(t, rc, "third", "c.3", 1, 2, "3600000", "try")
	require.Equal(t, int64(0), got[0], "both permits held")
	require.LessOrEqual(t, got[1], int64(51), "look again when the short lease ends")
	require.Eventually(t, func() bool {
		return semAcq(t, rc, "third", "c.3", 1, 2, "3600000", "try")[0] == 1
	}, 5*time.Second, 10*time.Millisecond, "the short lease's permit comes back")
	require.Len(t, semHolders(t, rc), 2, "holders: long and third")
}

// A queued waiter keeps its place past the place lease it was queued with
// as long as its attempts renew it (its record's place end): the release
// grants it; a waiter ahead of it that did not renew is dropped.
func TestSemaphoreRenewedPlace(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	acq := func(owner, waiter, place, first string) []int64 {
		return semInts(t, scripts.SemAcquire.Exec(ctx, rc, semKeys,
			[]string{owner, waiter, "1", "1", "10000", "wait", semCh, place, first}))
	}
	require.Equal(t, int64(1), acq("A", "a.1", "10000", "first")[0], "A holds")
	require.Equal(t, int64(0), acq("D", "d.1", "50", "first")[0], "D queues")
	require.Equal(t, int64(0), acq("W", "w.1", "50", "first")[0], "W queues")
	require.Equal(t, int64(0), acq("W", "w.1", "10000", "again")[0], "W renews its place")
	time.Sleep(80 * time.Millisecond) // the injected fault: both first places lapse
	r := semInts(t, scripts.SemRelease.Exec(ctx, rc, semKeys, []string{"A", "1", semCh, "1"}))
	require.Equal(t, []int64{1, 0}, r, "A releases")
	held := semHolders(t, rc)
	require.Len(t, held, 1, "the release granted the permit")
	require.True(t, strings.HasPrefix(held[0], "W "), "the release granted the permit to W, not D: %q", held)
	got := acq("W", "w.1", "10000", "again")
	require.Equal(t, int64(1), got[0], "W (renewed) was granted the permit: %v", got)
	require.Len(t, semHolders(t, rc), 1, "one holder: W")
	for _, c := range []rueidis.Completed{rc.B().Llen().Key(semKeys[2]).Build(), rc.B().Hlen().Key(semKeys[3]).Build()} {
		n, err := rc.Do(ctx, c).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "queue entries or records left")
	}
}
