package dsync_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The RWMutex scripts, called directly, with the Redis state checked after
// each.
func TestRWMutexScripts(t *testing.T) {
	rc := newRueidis(t)
	ctx := ctxT(t)
	keys := rwKeys(testPrefix(t), "s")
	wch := keys[0] + ":w:"
	// Waits: owner -> wid "<client>.<n>"; each Client's channel is wch +
	// client, and a grant is "<n> <token>" on it.
	wid := map[string]string{"a": "ca.1", "b": "cb.1", "c": "cc.1", "w1": "c1.1", "w2": "c2.1"}
	acquire := func(mode, owner, lease string, try bool) []int64 {
		t.Helper()
		tr := "0"
		if try {
			tr = "1"
		}
		v, err := scripts.RWAcquire.Exec(ctx, rc, keys, []string{mode, owner, lease, "10000", tr, wch, wid[owner]}).AsIntSlice()
		require.NoError(t, err)
		return v
	}
	release := func(mode, owner string, tok int64) int64 {
		t.Helper()
		n, err := scripts.RWRelease.Exec(ctx, rc, keys, []string{mode, owner, strconv.FormatInt(tok, 10), "", wch}).AsInt64()
		require.NoError(t, err)
		return n
	}
	renew := func(mode, owner string, tok int64, lease string) int64 {
		t.Helper()
		n, err := scripts.RWRenew.Exec(ctx, rc, keys, []string{mode, owner, strconv.FormatInt(tok, 10), lease}).AsInt64()
		require.NoError(t, err)
		return n
	}
	dc, cancel := rc.Dedicate()
	defer cancel()
	msgs := make(chan string, 16)
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m.Channel + "|" + m.Message }})
	require.NoError(t, dc.Do(ctx, dc.B().Psubscribe().Pattern(wch+"*").Build()).Error())
	defer func() { dc.Close(); <-wait }()
	grant := func(what, client, n string) int64 {
		t.Helper()
		select {
		case m := <-msgs:
			rest, ok := strings.CutPrefix(m, wch+client+"|"+n+" ")
			require.True(t, ok, "%s: got %q, want a grant to %s.%s", what, m, client, n)
			v, err := strconv.ParseInt(grantToken(t, rest), 10, 64)
			require.NoError(t, err, what)
			return v
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no grant", what)
			return 0
		}
	}

	a := acquire("read", "a", "10000", false)
	b := acquire("read", "b", "300", false) // b will die: short lease
	require.Equal(t, int64(1), a[0], "readers: %v %v", a, b)
	require.Equal(t, int64(1), b[0], "readers: %v %v", a, b)
	require.Greater(t, b[1], a[1], "readers: %v %v", a, b)
	h := hgetall(t, rc, keys[0])
	require.Equal(t, "read", h["mode"], "hash %v", h)
	require.Equal(t, "1 "+strconv.FormatInt(a[1], 10), h["r:a"], "hash %v", h)
	require.Equal(t, strconv.FormatInt(b[1], 10), h["tok"], "hash %v", h)
	v := acquire("read", "a", "10000", false)
	require.Equal(t, int64(2), v[0], "read re-entry %v", v)
	require.Equal(t, "2 "+strconv.FormatInt(a[1], 10), hgetall(t, rc, keys[0])["r:a"], "read re-entry %v", v)
	// w1 queues behind the readers; new reader c now waits behind w1.
	v = acquire("write", "w1", "10000", false)
	require.Equal(t, int64(0), v[0], "writer among readers = %v, want {0, <= b's lease}", v)
	require.Greater(t, v[1], int64(0), "writer among readers = %v, want {0, <= b's lease}", v)
	require.LessOrEqual(t, v[1], int64(300), "writer among readers = %v, want {0, <= b's lease}", v)
	v = acquire("read", "c", "10000", false)
	require.Equal(t, int64(0), v[0], "reader overtook a queued writer: %v", v)
	// a renews only itself; b's hold lapses on its own.
	waitFor(t, 3*time.Second, "b's hold to lapse", func() bool {
		require.Equal(t, int64(1), renew("read", "a", a[1], "10000"), "a's renewal failed")
		end, err := rc.Do(ctx, rc.B().Zscore().Key(keys[1]).Member("b").Build()).AsInt64()
		require.NoError(t, err)
		now, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		us, _ := strconv.ParseInt(now[1], 10, 64)
		return end <= sec*1000+us/1000
	})
	require.Equal(t, int64(0), renew("read", "b", b[1], "10000"), "a lapsed hold was renewed")
	require.Equal(t, int64(0), release("read", "x", 0), "foreign release succeeded")
	require.Equal(t, int64(0), release("write", "a", 0), "foreign release succeeded")
	require.Equal(t, int64(2), release("read", "a", a[1]), "first of a's two releases")
	require.Equal(t, int64(1), release("read", "a", a[1]), "a's last release")
	// The last live reader left (b's hold lapsed): w1, the first writer,
	// is granted the lock and told; the reader c still waits for it.
	w1 := grant("last read release", "c1", "1")
	require.Greater(t, w1, b[1], "w1's token")
	h = hgetall(t, rc, keys[0])
	require.Equal(t, "write", h["mode"], "hash %v after w1's grant", h)
	require.Equal(t, "w1", h["w"], "hash %v after w1's grant", h)
	require.Equal(t, "1", h["wc"], "hash %v after w1's grant", h)
	_, ok := h["r:b"]
	require.False(t, ok, "lapsed reader b left in the hash")
	require.Empty(t, lrange(t, rc, keys[2]), "hash %v after w1's grant", h)
	require.Equal(t, []int64{3, w1}, acquire("write", "w1", "10000", false), "w1's attempt after its grant")
	require.Equal(t, int64(0), acquire("read", "c", "10000", false)[0], "reader c got in past the writer")
	acquire("write", "w2", "10000", false)
	// Downgrade: w1 takes the read lock, then drops the write lock.
	v = acquire("read", "w1", "10000", false)
	require.Equal(t, int64(1), v[0], "writer's read = %v", v)
	require.Equal(t, int64(1), renew("write", "w1", w1, "10000"), "write renewal")
	require.Equal(t, int64(0), renew("write", "w2", w1, "10000"), "write renewal")
	require.Equal(t, int64(1), release("write", "w1", w1), "w1's write release")
	// c, which waited for w1, is granted a read hold ahead of the queued w2.
	c := grant("write release", "cc", "1")
	h = hgetall(t, rc, keys[0])
	require.Equal(t, "read", h["mode"], "after downgrade: %v", h)
	require.Equal(t, "", h["w"], "after downgrade: %v", h)
	require.Equal(t, "1 "+strconv.FormatInt(c, 10)+" cc.1", h["r:c"], "c's granted hold: %v", h)
	require.Equal(t, int64(0), acquire("write", "w2", "10000", true)[0], "writer got in past a downgraded reader")
	// w2 leaves; c's attempt finds its grant.
	n, err := scripts.RWLeave.Exec(ctx, rc, keys, []string{"write", "w2 c2.1 10000", wch}).AsInt64()
	require.NoError(t, err, "leave")
	require.Equal(t, int64(1), n, "leave")
	require.Empty(t, lrange(t, rc, keys[2]), "writer queue after w2 left")
	require.Equal(t, []int64{3, c}, acquire("read", "c", "10000", false), "reader c's attempt after its grant")
	select {
	case m := <-msgs:
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

// The FairMutex scripts, called directly, with the Redis state checked
// after each: a release grants the lock to the head of the queue and tells
// that wait alone, on its Client's channel.
func TestFairMutexScripts(t *testing.T) {
	rc := newRueidis(t)
	ctx := ctxT(t)
	prefix := testPrefix(t)
	keys := fairKeys(prefix, "s")
	wch := keys[0] + ":w:"
	// Waits: owner, its wid "<client>.<n>" and the member it queues as.
	wid := map[string]string{"a": "ca.1", "b": "cb.1", "c": "cc.1", "d": "cd.1", "e": "ce.1"}
	member := func(o string) string { return o + " " + wid[o] + " 10000" }
	acquire := func(owner string, try bool) []int64 {
		t.Helper()
		tr := "0"
		if try {
			tr = "1"
		}
		v, err := scripts.FairAcquire.Exec(ctx, rc, keys, []string{owner, "10000", "1000", tr, wch, wid[owner]}).AsIntSlice()
		require.NoError(t, err)
		return v
	}
	release := func(owner, tok string) int64 {
		t.Helper()
		n, err := scripts.FairRelease.Exec(ctx, rc, keys, []string{owner, tok, "60000", wch}).AsInt64()
		require.NoError(t, err)
		return n
	}
	leave := func(owner string) int64 {
		t.Helper()
		n, err := scripts.FairLeave.Exec(ctx, rc, keys, []string{member(owner), wch, "60000"}).AsInt64()
		require.NoError(t, err)
		return n
	}
	// Listen on b's and c's Clients' channels: only the head is told.
	dc, cancel := rc.Dedicate()
	defer cancel()
	msgs := make(chan string, 16)
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { msgs <- m.Channel + "|" + m.Message }})
	require.NoError(t, dc.Do(ctx, dc.B().Subscribe().Channel(wch+"cb", wch+"cc").Build()).Error())
	defer func() { dc.Close(); <-wait }()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(2 * time.Second):
			t.Fatalf("no message: %s", what)
			return ""
		}
	}

	a := acquire("a", false)
	require.Equal(t, int64(1), a[0], "acquire on a free lock = %v", a)
	require.Greater(t, a[1], int64(0), "acquire on a free lock = %v", a)
	tok := strconv.FormatInt(a[1], 10)
	require.Equal(t, "a "+tok+" 1", getStr(t, rc, keys[0]), "lock value")
	v := acquire("a", false)
	require.Equal(t, int64(2), v[0], "re-entry = %v, value", v)
	require.Equal(t, a[1], v[1], "re-entry = %v, value", v)
	require.Equal(t, "a "+tok+" 2", getStr(t, rc, keys[0]), "re-entry = %v, value", v)
	v = acquire("b", true)
	require.Equal(t, int64(0), v[0], "a try queued or was granted: %v", v)
	require.Empty(t, lrange(t, rc, keys[1]), "a try queued or was granted: %v", v)
	v = acquire("b", false)
	require.Equal(t, int64(0), v[0], "b = %v, want {0, pttl}", v)
	require.Greater(t, v[1], int64(0), "b = %v, want {0, pttl}", v)
	require.LessOrEqual(t, v[1], int64(10000), "b = %v, want {0, pttl}", v)
	acquire("c", false)
	acquire("b", false) // renews b's place, keeps its position
	q := lrange(t, rc, keys[1])
	require.Equal(t, []string{member("b"), member("c")}, q, "queue")
	require.Equal(t, int64(2), zcard(t, rc, keys[2]), "queue %q", q)
	require.Equal(t, int64(0), release("x", "0"), "foreign release")
	require.Equal(t, int64(2), release("a", tok), "first of two releases")
	require.Equal(t, int64(1), release("a", tok), "release")
	// The release granted the lock to b, the head, and told b's wait.
	m := next("the release's grant")
	rest, ok := strings.CutPrefix(m, wch+"cb|1 ")
	require.True(t, ok, "release published %q, want a grant to b's wait 1 on b's Client's channel", m)
	btok := grantToken(t, rest)
	require.Equal(t, "b "+btok+" 1 cb.1 "+tok, getStr(t, rc, keys[0]), "granted lock value")
	b, _ := strconv.ParseInt(btok, 10, 64)
	require.Greater(t, b, a[1], "granted token")
	require.Equal(t, []string{member("c")}, lrange(t, rc, keys[1]), "queue after the grant")
	require.Equal(t, int64(1), release("a", tok), "a retried release after a grant is a no-op")
	require.Equal(t, "b "+btok+" 1 cb.1 "+tok, getStr(t, rc, keys[0]), "a retried release changed the lock")
	// b's attempt (its message lost) claims the grant; another wait of b
	// re-enters and leaves the queue.
	// The claim restarts the lease: b counts it from the attempt's send
	// time, maybe long after the grant (here the grant's lease is made to
	// look nearly spent).
	require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(keys[0]).Milliseconds(500).Build()).Error())
	v = acquire("b", false)
	require.Equal(t, []int64{3, b}, v, "b's attempt after its grant")
	pttl, err := rc.Do(ctx, rc.B().Pttl().Key(keys[0]).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, pttl, int64(9000), "lease left after the claim (the grantee counts 10 s from its attempt)")
	wid["b"] = "cb.2"
	acquire("c", false)
	require.Equal(t, int64(1), leave("c"), "c leaves") // c is requeued below
	v = acquire("b", false)
	require.Equal(t, []int64{2, b}, v, "another wait of b re-enters")
	require.Equal(t, "b "+btok+" 2 cb.1 "+tok, getStr(t, rc, keys[0]), "re-entered grant")
	require.Empty(t, lrange(t, rc, keys[1]), "a re-entry left its member queued")
	require.Equal(t, int64(2), release("b", btok), "release one of b's two counts")
	// c waits; b's release grants c; c gives up before it sees the grant:
	// its leave releases the grant (nobody else waits: the free marker).
	acquire("c", false)
	require.Equal(t, int64(1), release("b", btok), "b's release")
	m = next("the grant to c")
	rest, ok = strings.CutPrefix(m, wch+"cc|1 ")
	require.True(t, ok, "release published %q, want a grant to c", m)
	ctok := grantToken(t, rest)
	require.Equal(t, int64(2), leave("c"), "c's leave after its grant")
	require.Equal(t, "- "+ctok+" 0", getStr(t, rc, keys[0]), "c's leave left the lock held")
	require.Equal(t, int64(0), leave("c"), "second leave")
	// The lock is free but b is first (its holder's lease ran out, so no
	// release granted it): c's attempt grants it to b and c queues.
	wid["b"], wid["c"] = "cb.3", "cc.2"
	require.Equal(t, int64(1), acquire("d", false)[0], "d on a free lock")
	acquire("b", false)
	acquire("c", false)
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(keys[0]).Build()).Error()) // d's lease ran out
	v = acquire("c", false)
	require.Equal(t, int64(0), v[0], "c overtook b: %v", v)
	m = next("the grant to b by c's attempt")
	require.True(t, strings.HasPrefix(m, wch+"cb|3 "), "c's attempt published %q, want a grant to b's wait 3", m)
	require.Equal(t, []string{member("c")}, lrange(t, rc, keys[1]), "queue")
	// A place not renewed lapses after its lease (1s here) and is dropped
	// when it reaches the head.
	btok = strings.Fields(getStr(t, rc, keys[0]))[1]
	require.Equal(t, int64(1), release("b", btok), "b's release")
	m = next("the grant to c")
	require.True(t, strings.HasPrefix(m, wch+"cc|2 "), "b's release published %q, want a grant to c", m)
	ctok = strings.Fields(getStr(t, rc, keys[0]))[1]
	acquire("e", false)
	require.Equal(t, []string{member("e")}, lrange(t, rc, keys[1]), "queue")
	waitFor(t, 3*time.Second, "e's place to lapse", func() bool {
		s, err := rc.Do(ctx, rc.B().Zscore().Key(keys[2]).Member(member("e")).Build()).AsInt64()
		if rueidis.IsRedisNil(err) {
			return true // the zset lapsed with its last place
		}
		require.NoError(t, err)
		now, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		return s <= sec*1000
	})
	require.Equal(t, int64(1), release("c", ctok), "c's release")
	require.Equal(t, "- "+ctok+" 0", getStr(t, rc, keys[0]), "a lapsed place was granted the lock")
	require.Empty(t, lrange(t, rc, keys[1]), "lapsed place left in the queue")
	require.Equal(t, int64(0), zcard(t, rc, keys[2]), "lapsed place left in the zset")
	select {
	case m := <-msgs:
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

// grantToken checks the rest of a grant message, "<token> <µs>" (µs: the
// grant's server time, which the token is never below), and returns the
// token.
func grantToken(t *testing.T, rest string) string {
	t.Helper()
	tok, at, ok := strings.Cut(rest, " ")
	require.True(t, ok, "grant %q: want <token> <server µs>", rest)
	tv, err := strconv.ParseUint(tok, 10, 64)
	require.NoError(t, err, "grant %q", rest)
	av, err := strconv.ParseUint(at, 10, 64)
	require.NoError(t, err, "grant %q", rest)
	require.LessOrEqual(t, av, tv, "grant %q: the token is below the grant's server time", rest)
	require.Greater(t, av, uint64(1e15), "grant %q: not a server time in µs", rest)
	return tok
}
