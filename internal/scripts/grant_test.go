package scripts_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// grantLock is one Mutex name's keys for the grant's tests, with the
// reads they share.
type grantLock struct {
	t             *testing.T
	rc            rueidis.Client
	key, wkey, gq string
}

func newGrantLock(t *testing.T, rc rueidis.Client, tag string) *grantLock {
	key := "p:{" + tag + "}:mutex"
	return &grantLock{t: t, rc: rc, key: key, wkey: key + ":waiting", gq: key + ":gq"}
}

// get is the lock's value ("" when there is none).
func (g *grantLock) get() string {
	v, _ := g.rc.Do(context.Background(), g.rc.B().Get().Key(g.key).Build()).ToString()
	return v
}

// wait is an attempt by a fresh owner (no attempt marker; its wait is
// named by the owner's last 8 characters): {1, token} when it acquired,
// {0, pttl, server µs} when it waits.
func (g *grantLock) wait(owner, client, registered string) []int64 {
	g.t.Helper()
	v, err := scripts.MutexAcquire.Exec(context.Background(), g.rc, []string{g.key}, []string{owner, "10000", client, "1", registered}).ToMessage()
	require.NoError(g.t, err)
	if v.IsInt64() {
		n, _ := v.AsInt64()
		return []int64{1, n}
	}
	r, err := v.AsIntSlice()
	require.NoError(g.t, err)
	return r
}

// queued is the grant queue, first to be granted first.
func (g *grantLock) queued() []string {
	v, err := g.rc.Do(context.Background(), g.rc.B().Lrange().Key(g.gq).Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(g.t, err)
	return v
}

// The one-hop grant (lib.lua's lock_grant): a release hands the Mutex to
// the longest-waiting live wait by an owner made for it alone, with a new
// token, in the release itself; the grantee claims it with an attempt if
// its message was lost, a wait that gives up releases a grant it got
// meanwhile (on to the next wait), a wait whose entry lapsed is passed
// over, and a wait by a caller's owner is never queued (it is woken).
func TestMutexGrant(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	l := newGrantLock(t, rc, "g")
	key, wkey, get, wait, queued := l.key, l.wkey, l.get, l.wait, l.queued
	release := func(owner string, tok int64) int64 {
		t.Helper()
		return num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{owner + " " + strconv.FormatInt(tok, 10) + " 1"}))
	}
	a := wait("A-0000000", "client-a", "0")
	require.Equal(t, int64(1), a[0], "A's acquire = %v", a)
	b := wait("B-0000001", "client-b", "0")
	require.Len(t, b, 3, "a fresh wait's reply {0, pttl, server µs}: %v", b)
	require.Equal(t, int64(0), b[0])
	require.Greater(t, b[2], a[1]-1, "server µs of the wait")
	c := wait("C-0000002", "client-c", "0")
	require.Equal(t, int64(0), c[0])
	// A caller's owner (an attempt marker) waits, but does not queue.
	require.NoError(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":a:dd-0000003"}, []string{"D", "10000", "client-d", "1", "0"}).Error())
	require.Equal(t, []string{"10000 B-0000001 client-b -0000001", "10000 C-0000002 client-c -0000002"}, queued())

	// A's release grants B (the first to wait) with the next token; C's
	// and D's entries keep the mark.
	require.Equal(t, int64(1), release("A-0000000", a[1]))
	v := get()
	tokB, err := strconv.ParseInt(v[len("B-0000001 "):len(v)-len(" 1 g w")], 10, 64)
	require.NoError(t, err, "value %q", v)
	require.Equal(t, "B-0000001 "+strconv.FormatInt(tokB, 10)+" 1 g w", v)
	require.Greater(t, tokB, a[1])
	require.Equal(t, []string{"10000 C-0000002 client-c -0000002"}, queued())

	// B's message was lost: its next attempt claims the grant, its token.
	r := wait("B-0000001", "client-b", "1")
	require.Equal(t, []int64{1, tokB}, r, "B's claim")
	require.Equal(t, "B-0000001 "+strconv.FormatInt(tokB, 10)+" 1 w", get())

	// B's release grants C; D is woken instead (not queued).
	require.Equal(t, int64(1), release("B-0000001", tokB))
	v = get()
	require.Regexp(t, `^C-0000002 \d+ 1 g w$`, v)
	tokC, _ := strconv.ParseInt(v[len("C-0000002 "):len(v)-len(" 1 g w")], 10, 64)
	require.Greater(t, tokC, tokB)
	require.Empty(t, queued())

	// C gave up as it was granted: its end releases the grant, which
	// nobody queues for: freed, with D's wakeup.
	require.Equal(t, int64(2), num(t, scripts.MutexUnwait.Exec(ctx, rc, []string{key, wkey}, []string{"client-c", "-0000002", "C-0000002", "10000"})))
	require.Equal(t, "- "+strconv.FormatInt(tokC, 10)+" 0", get())

	// A wait whose entry lapsed (here: removed) is passed over.
	e := wait("E-0000004", "client-e", "0")
	require.Equal(t, int64(1), e[0], "E's acquire = %v", e)
	f := wait("F-0000005", "client-f", "0")
	require.Equal(t, int64(0), f[0])
	g := wait("G-0000006", "client-g", "0")
	require.Equal(t, int64(0), g[0])
	require.NoError(t, rc.Do(ctx, rc.B().Hdel().Key(wkey).Field("client-f -0000005").Build()).Error())
	require.Equal(t, int64(1), release("E-0000004", e[1]))
	require.Regexp(t, `^G-0000006 \d+ 1 g( w)?$`, get(), "granted past the lapsed wait")
}

// A grant its Client finds no wait for (the wait gave up and its own
// release of the grant did not reach Redis, say) is released by that
// Client with the owner alone (mutex_unwait.lua without a lease): on to
// the next queued wait, here another of the same Client, which the mark
// does not count. The wait, if it was alive after all, queues again with
// its next attempt, since its entry went with the grant.
func TestMutexGrantUnclaimed(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	g := newGrantLock(t, rc, "h")
	key, wkey, get, queued := g.key, g.wkey, g.get, g.queued
	// attempt is the token a fresh owner's attempt acquired (0: it waits).
	attempt := func(owner, client, registered string) int64 {
		t.Helper()
		if r := g.wait(owner, client, registered); r[0] == 1 {
			return r[1]
		}
		return 0
	}
	tokA := attempt("A-0000000", "client-a", "0")
	require.NotZero(t, tokA)
	require.Zero(t, attempt("B-0000001", "client-b", "0"))
	require.Zero(t, attempt("B-0000002", "client-b", "0"))
	require.Equal(t, int64(1), num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key}, []string{"A-0000000 " + strconv.FormatInt(tokA, 10) + " 1"})))
	require.Regexp(t, `^B-0000001 \d+ 1 g$`, get(), "granted to B1; B2 is of the grantee's Client: no mark")
	require.Equal(t, int64(2), num(t, scripts.MutexUnwait.Exec(ctx, rc, []string{key, wkey}, []string{"client-b", "-0000001", "B-0000001"})))
	require.Regexp(t, `^B-0000002 \d+ 1 g$`, get(), "the unclaimed grant went on to B2")
	require.Empty(t, queued())
	// B1 was alive: its next attempt finds the lock held and queues again.
	require.Zero(t, attempt("B-0000001", "client-b", "1"))
	require.Equal(t, []string{"10000 B-0000001 client-b -0000001"}, queued())
}

// A wait that gives up by its own owner reads the lock once, whether or
// not the lock is there: mutex_unwait.lua read a missing lock a second
// time for the waiter mark (2 GETs before 2026-12-07).
func TestMutexUnwaitReadsOnce(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	g := newGrantLock(t, rc, "u")
	tok := g.wait("A-0000000", "client-a", "0")
	require.Equal(t, int64(1), tok[0])
	require.Equal(t, int64(0), g.wait("B-0000001", "client-b", "0")[0])
	unwait := func() int64 {
		return num(t, scripts.MutexUnwait.Exec(ctx, rc, []string{g.key, g.wkey}, []string{"client-b", "-0000001", "B-0000001", "10000"}))
	}
	// The lock held by A, with B's mark: B's entry and mark go.
	cmds := commands(t, rc, func() { require.Equal(t, int64(1), unwait()) })
	require.Equal(t, 1, cmds["get"], "GETs with the lock held: %v", cmds)
	require.Equal(t, "A-0000000 "+strconv.FormatInt(tok[1], 10)+" 1", g.get())
	// The lock gone (expired, say): nothing to unmark.
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(g.key).Build()).Error())
	cmds = commands(t, rc, func() { require.Equal(t, int64(0), unwait()) })
	require.Equal(t, 1, cmds["get"], "GETs with the lock missing: %v", cmds)
}

// A grant's token is the server clock in µs only when the release's last
// token used is below it; a hold that reserved a block ahead of the clock
// passes its last token used, and the grant continues after it.
func TestMutexGrantTokenAfterUsed(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	l := newGrantLock(t, rc, "u")
	a := l.wait("A-0000000", "client-a", "0")
	require.Equal(t, int64(1), a[0], "A's acquire = %v", a)
	require.Equal(t, int64(0), l.wait("B-0000001", "client-b", "0")[0])

	// 10^6 s ahead of the clock (as many digits).
	ahead := a[1] + 1_000_000_000_000
	hold := "A-0000000 " + strconv.FormatInt(a[1], 10) + " 1"
	require.Equal(t, int64(1), num(t, scripts.MutexRelease.Exec(ctx, rc, []string{l.key}, []string{hold, strconv.FormatInt(ahead, 10)})))
	require.Equal(t, "B-0000001 "+strconv.FormatInt(ahead+1, 10)+" 1 g", l.get())
}
