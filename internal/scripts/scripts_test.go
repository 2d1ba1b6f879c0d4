package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func ints(t *testing.T, r rueidis.RedisResult) []int64 {
	t.Helper()
	v, err := r.AsIntSlice()
	require.NoError(t, err)
	return v
}

// acqInts reads mutex_acquire.lua's reply as {code, n}: a bare integer n
// is its reply for "acquired, token n" ({1, n}); any other reply is an
// array, and never {1, ...}.
func acqInts(t *testing.T, r rueidis.RedisResult) []int64 {
	t.Helper()
	msg, err := r.ToMessage()
	require.NoError(t, err)
	if msg.IsInt64() {
		n, err := msg.AsInt64()
		require.NoError(t, err)
		return []int64{1, n}
	}
	v, err := msg.AsIntSlice()
	require.NoError(t, err)
	require.Len(t, v, 2, "acquire reply %v", v)
	require.NotEqual(t, int64(1), v[0], "acquire reply %v: an acquisition replies with its bare token", v)
	return v
}

func num(t *testing.T, r rueidis.RedisResult) int64 {
	t.Helper()
	v, err := r.AsInt64()
	require.NoError(t, err)
	return v
}

// firstN returns the first two bytes of a reply string ("" on error).
func firstN(v string, err error) string {
	if err != nil || len(v) < 2 {
		return ""
	}
	return v[:2]
}

func TestMutexScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{n}:mutex", "p:{n}:mutex:ch"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	acq := func(owner string) []int64 {
		return acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{owner, "10000"}))
	}
	rel := func(owner string, tok int64) int64 {
		hold := owner // token 0: any hold of the owner
		if tok != 0 {
			hold += " " + strconv.FormatInt(tok, 10) + " 1"
		}
		return num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{hold}))
	}

	before := time.Now().UnixMicro()
	a := acq("A")
	require.Equal(t, int64(1), a[0], "acquire = %v", a)
	require.GreaterOrEqual(t, a[1], before, "acquire = %v", a)
	tok := a[1]
	require.Equal(t, "A "+strconv.FormatInt(tok, 10)+" 1", get(), "value")
	r := acq("A")
	require.Equal(t, int64(2), r[0], "re-entry = %v", r)
	require.Equal(t, tok, r[1], "re-entry = %v", r)
	// A waiting attempt (ARGV[3..5]: the waiting Client, its count, not
	// registered yet) marks the value, so that the release publishes.
	r = acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":a:cb-wait0001"}, []string{"B", "10000", "client-b", "1", "0"}))
	require.Equal(t, int64(0), r[0], "waiting attempt = %v, want {0, pttl}", r)
	require.Equal(t, "A "+strconv.FormatInt(tok, 10)+" 2 w", get(), "value marked by a waiter")
	// The entry is the wait's: "<client> <wait>", the wait named by the
	// last 8 characters of its attempt marker.
	require.Equal(t, "1 ", firstN(rc.Do(ctx, rc.B().Hget().Key(key+":waiting").Field("client-b wait0001").Build()).ToString()), "the waiting count of client-b's wait")
	r = acq("B")
	require.Equal(t, int64(0), r[0], "other owner = %v, want {0, pttl}", r)
	require.Greater(t, r[1], int64(0), "other owner = %v, want {0, pttl}", r)
	require.LessOrEqual(t, r[1], int64(10000), "other owner = %v, want {0, pttl}", r)
	require.Equal(t, int64(0), rel("B", tok), "foreign release")
	require.Equal(t, int64(0), rel("A", tok+1), "release with a wrong token")
	require.Equal(t, "A "+strconv.FormatInt(tok, 10)+" 2 w", get(), "value after the refused releases")
	require.Greater(t, num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build())), int64(5000), "lease after the refused releases")
	require.Equal(t, int64(2), rel("A", tok), "first release")
	require.True(t, strings.HasSuffix(get(), " 1 w"), "value %q after the first release: count 1, still marked", get())
	// The release publishes the token on the channel.
	sub := s.Client(t)
	msgs := make(chan string, 1)
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	subscribed := make(chan struct{})
	go sub.Receive(rueidis.WithOnSubscriptionHook(subCtx, func(rueidis.PubSubSubscription) { close(subscribed) }),
		sub.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) { msgs <- m.Message })
	<-subscribed
	require.Equal(t, int64(1), rel("A", tok), "last release")
	require.Equal(t, "- "+strconv.FormatInt(tok, 10)+" 0", get(), "last release")
	select {
	case m := <-msgs:
		require.Equal(t, strconv.FormatInt(tok, 10), m, "published")
	case <-time.After(5 * time.Second):
		t.Fatal("the release of a marked lock published nothing")
	}
	// The free marker keeps the rest of the hold's lease (one SET ... GET
	// KEEPTTL): after it, the next token comes from the clock, which has
	// passed every token issued under the hold.
	ttl := num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build()))
	require.Greater(t, ttl, int64(0), "free marker ttl")
	require.LessOrEqual(t, ttl, int64(10000), "free marker ttl: the rest of the lease")
	// A retried release (reply lost) is a no-op success.
	require.Equal(t, int64(1), rel("A", tok), "retried release")
	// The next token continues from the marker.
	b := acq("B")
	require.Equal(t, int64(1), b[0], "after the marker: %v", b)
	require.Greater(t, b[1], tok, "after the marker: %v", b)
	// Renew only the exact hold.
	renew := func(prefix string) int64 {
		return num(t, scripts.MutexRenew.Exec(ctx, rc, []string{key}, []string{prefix, "20000"}))
	}
	require.Equal(t, int64(0), renew("A "+strconv.FormatInt(b[1], 10)+" "), "renewed a hold that is not the owner's")
	require.Equal(t, int64(0), renew("B "+strconv.FormatInt(tok, 10)+" "), "renewed a hold that is not the owner's")
	require.Equal(t, int64(1), renew("B "+strconv.FormatInt(b[1], 10)+" "), "renewal did not extend the lease")
	require.Greater(t, num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build())), int64(10000), "renewal did not extend the lease")
	// Handoff B -> C: new token, count 1, idempotent on retry.
	hand := func() []int64 {
		return ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"B", strconv.FormatInt(b[1], 10), "C", "5000", "-1", "60000", "1"}))
	}
	h := hand()
	require.Equal(t, int64(1), h[0], "handoff = %v, value", h)
	require.Greater(t, h[1], b[1], "handoff = %v, value", h)
	require.Equal(t, "C "+strconv.FormatInt(h[1], 10)+" 1", get(), "handoff = %v, value", h)
	h2 := hand()
	require.Equal(t, int64(1), h2[0], "retried handoff = %v", h2)
	require.Equal(t, h[1], h2[1], "retried handoff = %v", h2)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"X", "1", "D", "5000", "-1", "60000", "1"}))
	require.Equal(t, int64(0), r[0], "handoff from a non-holder = %v", r)
	// A handoff is refused while the holder has re-entered (count 2).
	acq("C")
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"C", strconv.FormatInt(h[1], 10), "D", "5000", "-1", "60000", "1"}))
	require.Equal(t, int64(0), r[0], "handoff with count 2 = %v", r)
	// With a check, a handoff hands over while only the caller's own
	// subscription (or none) is on the channel, or while no waiter of
	// another Client marked the value (a subscription alone is no wait: a
	// Client stays subscribed a while after its waits), and yields to
	// other subscribers once one marked it: the lock becomes free and they
	// are told.
	rel("C", 0)                                                                                  // back to count 1
	cur := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"Z", "10000"})) // {0, pttl}: held by C
	require.Equal(t, int64(0), cur[0], "C lost the lock: %v", cur)
	tokC := strconv.FormatInt(h[1], 10)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"C", tokC, "D", "5000", "1", "60000", "1"}))
	require.Equal(t, int64(1), r[0], "checked handoff with only the own subscriber (1) = %v, want handed over", r)
	tokD := strconv.FormatInt(r[1], 10)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"D", tokD, "E", "5000", "0", "60000", "1"}))
	require.Equal(t, int64(1), r[0], "checked handoff with a foreign subscriber but no waiter's mark = %v, want handed over", r)
	tokE := strconv.FormatInt(r[1], 10)
	require.Equal(t, "E "+tokE+" 1", get(), "after the handoff the value")
	r = acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":a:cb-wait0002"}, []string{"B", "10000", "client-b", "1", "0"}))
	require.Equal(t, int64(0), r[0], "waiting attempt = %v, want {0, pttl}", r)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"E", tokE, "F", "5000", "1", "60000", "1"}))
	require.Equal(t, int64(1), r[0], "checked handoff, marked, with only the own subscriber (1) = %v, want handed over", r)
	tokD = strconv.FormatInt(r[1], 10)
	require.Equal(t, "F "+tokD+" 1 w", get(), "a handoff keeps the waiter's mark")
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"F", tokD, "G", "5000", "0", "60000", "1"}))
	require.Equal(t, int64(2), r[0], "checked handoff, marked, with a foreign subscriber = %v, want a yield", r)
	require.Equal(t, "- "+tokD+" 0", get(), "after a yield the value")
	select {
	case m := <-msgs:
		require.Equal(t, tokD, m, "yield published")
	case <-time.After(5 * time.Second):
		t.Fatal("the yield published nothing")
	}
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"F", tokD, "G", "5000", "0", "60000", "1"}))
	require.Equal(t, int64(2), r[0], "retried yield = %v", r)
	// The hard cap's check ("w"): yield if marked, subscribed or not (no
	// subscriber on this lock's channel).
	wk, wch := "p:{cap}:mutex", "p:{cap}:mutex:ch"
	x := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{wk}, []string{"X", "10000"}))
	require.Equal(t, int64(1), x[0], "acquire = %v", x)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{wk, wch}, []string{"X", strconv.FormatInt(x[1], 10), "Y", "5000", "w", "60000", "1"}))
	require.Equal(t, int64(1), r[0], "cap's handoff, not marked = %v, want handed over", r)
	tokY := strconv.FormatInt(r[1], 10)
	r = acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{wk, wk + ":a:cb-wait0003"}, []string{"B", "10000", "client-b", "1", "0"}))
	require.Equal(t, int64(0), r[0], "waiting attempt = %v, want {0, pttl}", r)
	r = ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{wk, wch}, []string{"Y", tokY, "Z", "5000", "w", "60000", "1"}))
	require.Equal(t, int64(2), r[0], "cap's handoff, marked, nobody subscribed = %v, want a yield", r)
	wv, _ := rc.Do(ctx, rc.B().Get().Key(wk).Build()).ToString()
	require.Equal(t, "- "+tokY+" 0", wv, "after the cap's yield the value")
	acq("C")
	acq("C")
	// Reservations: an acquisition reserving 4 tokens records the last, and
	// the next acquisition anywhere starts above it; a handoff reserves too.
	rc.Do(ctx, rc.B().Del().Key("p:{r}:mutex").Build())
	rk := []string{"p:{r}:mutex"}
	r1 := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, rk, []string{"R", "10000", "", "", "0", "4"}))
	v, _ := rc.Do(ctx, rc.B().Get().Key(rk[0]).Build()).ToString()
	require.Equal(t, "R "+strconv.FormatInt(r1[1]+3, 10)+" 1 b", v, "reserving acquire: %v, value (\" b\": a block)", r1)
	// With a block, the owner does not re-enter through another Client:
	// its Client may have handed the lock to another owner of its own.
	re := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, rk, []string{"R", "10000"}))
	require.Equal(t, int64(0), re[0], "re-entry through another Client into a block = %v, want {0, pttl}", re)
	last := strconv.FormatInt(r1[1]+3, 10)
	h4 := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{rk[0], "p:{r}:mutex:ch"}, []string{"R", last, "S", "5000", "-1", "60000", "4"}))
	require.Equal(t, int64(1), h4[0], "reserving handoff = %v", h4)
	require.Greater(t, h4[1], r1[1]+3, "reserving handoff = %v", h4)
	again := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{rk[0], "p:{r}:mutex:ch"}, []string{"R", last, "S", "5000", "-1", "60000", "4"}))
	require.Equal(t, int64(1), again[0], "retried reserving handoff = %v, want %v", again, h4)
	require.Equal(t, h4[1], again[1], "retried reserving handoff = %v, want %v", again, h4)
	// Token-less release (owner only) works for the owner.
	require.Equal(t, int64(2), rel("C", 0), "owner-only releases failed")
	require.Equal(t, int64(1), rel("C", 0), "owner-only releases failed")
	// Without a marker the token comes from the server clock.
	rc.Do(ctx, rc.B().Del().Key(key).Build())
	r = acq("E")
	require.Equal(t, int64(1), r[0], "after DEL: %v", r)
	require.Greater(t, r[1], h[1], "after DEL: %v", r)
}

// TestMutexUndo: an attempt marker makes the undo of a lost acquire reply
// exact in either order: after the acquire it releases exactly that count;
// before it (the acquire still on its way) it makes the acquire a no-op.
func TestMutexUndo(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key := "p:{u}:mutex"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	acq := func(marker string) []int64 {
		return acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, marker}, []string{"O", "10000"}))
	}
	undo := func(marker string) int64 {
		return num(t, scripts.MutexUndo.Exec(ctx, rc, []string{key, marker}, []string{"O"}))
	}
	first := acq(key + ":a:1") // the owner's hold through some Client
	require.Equal(t, int64(1), first[0], "acquire = %v", first)
	held := get()
	r := acq(key + ":a:2") // re-entry through another
	require.Equal(t, int64(2), r[0], "re-entry = %v", r)
	require.Equal(t, int64(2), undo(key+":a:2"), "undo after the acquire")
	require.Equal(t, held, get(), "after the undo")
	require.Equal(t, int64(0), undo(key+":a:2"), "repeated undo")
	// The undo overtakes its acquire: the acquire then changes nothing.
	require.Equal(t, int64(0), undo(key+":a:3"), "undo before the acquire")
	r = acq(key + ":a:3")
	require.Equal(t, int64(0), r[0], "acquire after its undo = %v, want {0, 0}", r)
	require.Equal(t, held, get(), "after the late acquire")
}

// A block of tokens reserved by an acquisition is recorded in the value,
// but a release (or a yield) records the last token actually issued, so
// the next acquisition continues from it and not from the block's end,
// which may be ahead of the server clock.
func TestMutexReleaseRecordsUsedToken(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key := "p:{u}:mutex"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	a := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"A", "10000", "", "", "0", "1000000"}))
	end := strconv.FormatInt(a[1]+1000000-1, 10)
	require.Equal(t, "A "+end+" 1 b", get(), "value, want the block's end recorded")
	used := strconv.FormatInt(a[1]+2, 10) // two local handoffs happened
	rel := func() int64 {
		return num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{"A " + end + " 1", used}))
	}
	require.Equal(t, int64(1), rel(), "release")
	v := get()
	require.Equal(t, "- "+used+" 0", v, "free marker %q, want the last token used %s", v, used)
	require.Equal(t, int64(1), rel(), "a retried release")
	require.Equal(t, int64(0), num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{"A"})), "an owner-only release of a free lock")
	b := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"B", "10000"}))
	require.Greater(t, b[1], a[1]+2, "next token and from the clock, not past the block's end")
	require.Less(t, b[1], a[1]+1000000-1, "next token and from the clock, not past the block's end")
}

// TestMutexUndoFresh: for an owner made for one call, the acquire only
// checks its mark (no key is written on a grant), and the undo marks then
// releases: before the acquire arrives it makes the acquire a no-op, after
// it it releases the grant.
func TestMutexUndoFresh(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key := "p:{f}:mutex"
	acq := func(owner string) []int64 {
		// No attempt marker: a fresh owner, whose mark the script names.
		return acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{owner, "10000"}))
	}
	undo := func(owner string) {
		require.NoError(t, scripts.MutexUndoFresh.Exec(ctx, rc, []string{key, key + ":x:" + owner}, []string{owner}).Error())
	}
	exists := func(k string) bool {
		n, err := rc.Do(ctx, rc.B().Exists().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		return n == 1
	}
	// Acquire first, then the undo: released.
	r := acq("A")
	require.Equal(t, int64(1), r[0], "acquire = %v", r)
	require.False(t, exists(key+":x:A"), "a grant in check mode wrote the mark")
	undo("A")
	r = acq("B")
	require.Equal(t, int64(1), r[0], "after the undo the lock is free: %v", r)
	// The undo first (B still holds), then the late acquire: a no-op, even
	// once the lock is free.
	undo("C")
	require.Equal(t, int64(1), num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{"B"})), "B's release")
	r = acq("C")
	require.Equal(t, int64(0), r[0], "a late acquire after its undo = %v, want a no-op", r)
	v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
	if len(v) > 0 {
		require.Equal(t, byte('-'), v[0], "lock value %q after a no-op acquire, want free", v)
	}

}

// A free marker's token is continued even when it is ahead of the server
// clock (the clock stepped back, or a block's tokens were issued fast): the
// next token is one more, spelled in full, with or without a block.
func TestMutexAcquireContinuesMarker(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key := "p:{m}:mutex"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	const ahead = int64(9000000000000000) // µs, far past the clock
	for _, tc := range []struct {
		block string
		value string
	}{
		{"1", "O 9000000000000001 1"},
		{"4", "O 9000000000000004 1 b"},
	} {
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(key).Value("- "+strconv.FormatInt(ahead, 10)+" 0").Build()).Error())
		r := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"O", "10000", "", "", "0", tc.block}))
		require.Equal(t, []int64{1, ahead + 1}, r, "acquire after a marker ahead of the clock, block %s", tc.block)
		require.Equal(t, tc.value, get(), "value, block %s", tc.block)
	}
}

// A wait's end (mutex_unwait.lua) removes its own entry from the waiting
// count, never a newer wait's of the same Client, and the " w" mark only
// with the last entry: sent in the background, it may come after a new
// wait of that Client registered.
func TestMutexUnwaitPerWait(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, wkey := "p:{u}:mutex", "p:{u}:mutex:waiting"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	wait := func(marker string) {
		t.Helper()
		r := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":a:cb-" + marker}, []string{"B" + marker, "10000", "client-b", "1", "0"}))
		require.Equal(t, int64(0), r[0], "wait %s = %v, want {0, pttl}", marker, r)
	}
	unwait := func(marker string) int64 {
		return num(t, scripts.MutexUnwait.Exec(ctx, rc, []string{key, wkey}, []string{"client-b", marker}))
	}
	fields := func() []string {
		v, err := rc.Do(ctx, rc.B().Hkeys().Key(wkey).Build()).AsStrSlice()
		require.NoError(t, err)
		return v
	}
	a := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"A", "10000"}))
	require.Equal(t, int64(1), a[0], "A's acquire = %v", a)
	wait("wait0001") // a wait that will give up
	wait("wait0002") // a newer wait of the same Client, registered before the first's end
	require.ElementsMatch(t, []string{"client-b wait0001", "client-b wait0002"}, fields(), "one entry per wait")
	require.Equal(t, int64(0), unwait("wait0001"), "the first wait's end removed the mark")
	require.Equal(t, []string{"client-b wait0002"}, fields(), "the newer wait's entry after the first's end")
	require.True(t, strings.HasSuffix(get(), " w"), "value %q: the mark went with a wait still registered", get())
	require.Equal(t, int64(1), unwait("wait0002"), "the last wait's end")
	require.Empty(t, fields(), "entries after every wait ended")
	require.False(t, strings.HasSuffix(get(), " w"), "value %q: marked with nobody waiting", get())
	// A registered wait that acquires removes its own entry only.
	wait("wait0003")
	wait("wait0004")
	require.Equal(t, int64(1), num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{"A " + strconv.FormatInt(a[1], 10) + " 1"})), "A's release")
	r := acqInts(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":a:cb-wait0004"}, []string{"Bwait0004", "10000", "client-b", "1", "1"}))
	require.Equal(t, int64(1), r[0], "wait0004's acquire = %v", r)
	require.Equal(t, []string{"client-b wait0003"}, fields(), "entries after wait0004 acquired")
}
