package scripts_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The RWMutex's keys (dsync's NewRWMutex: the hash, readers, writer queue,
// queue places, waiting readers, unused), and its waiters' channel prefix.
var rwKeys = []string{"p:{r}:rw", "p:{r}:rw:readers", "p:{r}:rw:queue", "p:{r}:rw:places", "p:{r}:rw:rwait", "p:{r}:rw:radmit"}

const rwCh = "p:{r}:rw:w:"

// rwAcq runs one attempt of owner (its wait is "c<owner>.1") for mode
// "read" or "write", with a 10 s queue place.
func rwAcq(t *testing.T, rc rueidis.Client, mode, owner, lease string, try bool) []int64 {
	t.Helper()
	tr := "0"
	if try {
		tr = "1"
	}
	return ints(t, scripts.RWAcquire.Exec(context.Background(), rc, rwKeys, []string{mode, owner, lease, "10000", tr, rwCh, "c" + owner + ".1"}))
}

func rwRel(t *testing.T, rc rueidis.Client, mode, owner string) int64 {
	t.Helper()
	return num(t, scripts.RWRelease.Exec(context.Background(), rc, rwKeys, []string{mode, owner, "0", "", rwCh}))
}

var cmdStat = regexp.MustCompile(`cmdstat_([\w|]+):calls=(\d+)`)

// commands runs f and returns the commands Redis ran for it, by name,
// those run by scripts included (CONFIG RESETSTAT before, INFO after).
func commands(t *testing.T, rc rueidis.Client, f func()) map[string]int {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
	f()
	info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	got := map[string]int{}
	for _, m := range cmdStat.FindAllStringSubmatch(info, -1) {
		if m[1] != "info" && m[1] != "config|resetstat" {
			got[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	return got
}

// The RWMutex scripts keep house only when something changed (rw_lib.lua):
// a writer that queues behind others, a waiting writer's renewal and a
// write release that grants the next writer, with no reader ever, prune
// nothing, look for no reader and set no key's lifetime.
func TestRWHousekeepingOnlyWhenChanged(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	require.Equal(t, int64(1), rwAcq(t, rc, "write", "w1", "10000", false)[0], "w1 takes the lock")
	require.Equal(t, int64(0), rwAcq(t, rc, "write", "w2", "10000", false)[0], "w2 queues")
	none := []string{"pexpire", "pttl", "zrangebyscore", "zrange", "zcard", "del", "hget", "exists"}
	cmds := commands(t, rc, func() {
		require.Equal(t, int64(0), rwAcq(t, rc, "write", "w3", "10000", false)[0], "w3 queues")
	})
	for _, c := range none {
		require.Zero(t, cmds[c], "%s in a writer's queueing behind another: %v", c, cmds)
	}
	require.Equal(t, 1, cmds["pexpireat"], "a writer's queueing behind another: one PEXPIREAT NX (the places set may be new): %v", cmds)
	require.Equal(t, 1, cmds["hmget"], "a writer's queueing: %v", cmds)
	cmds = commands(t, rc, func() {
		require.Equal(t, int64(0), rwAcq(t, rc, "write", "w3", "10000", false)[0], "w3 renews its place")
	})
	for _, c := range append(none, "pexpireat", "rpush") {
		require.Zero(t, cmds[c], "%s in a waiting writer's renewal: %v", c, cmds)
	}
	cmds = commands(t, rc, func() {
		require.Equal(t, int64(1), rwRel(t, rc, "write", "w1"), "w1's release")
	})
	for _, c := range append(none, "pexpireat", "hdel") {
		require.Zero(t, cmds[c], "%s in a write release that grants the next writer: %v", c, cmds)
	}
	require.Equal(t, 1, cmds["publish"], "the grant to w2: %v", cmds)
	h := hash(t, rc, rwKeys[0])
	require.Equal(t, "w2", h["w"], "hash %v", h)
	require.Equal(t, "write", h["mode"], "hash %v", h)
}

// Every key of an RWMutex lives until an hour past the last lease or queue
// place, set on creation and moved by a lease past it, though most calls
// set none (TestRWHousekeepingOnlyWhenChanged).
func TestRWKeysLifetime(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	hour := int64(3600000)
	check := func(what string, atLeast int64, want int) {
		t.Helper()
		n := 0
		for _, k := range rwKeys {
			ttl, err := rc.Do(ctx, rc.B().Pttl().Key(k).Build()).AsInt64()
			require.NoError(t, err)
			if ttl == -2 {
				continue // no such key
			}
			n++
			require.GreaterOrEqual(t, ttl, atLeast, "%s: %s has %d ms left", what, k, ttl)
		}
		require.Equal(t, want, n, "%s: keys", what)
	}
	require.Equal(t, int64(1), rwAcq(t, rc, "read", "r1", "10000", false)[0], "r1 reads")
	check("after the first read", hour-5000, 2) // hash, readers
	require.Equal(t, int64(0), rwAcq(t, rc, "write", "w1", "10000", false)[0], "w1 queues")
	check("after a writer queued", hour-5000, 4) // and the queue's keys
	require.Equal(t, int64(0), rwAcq(t, rc, "read", "r2", "10000", false)[0], "r2 waits behind w1")
	check("after a reader waited", hour-5000, 5) // and the waiting readers
	// The readers' and the queue's keys go and come back: each gets the
	// lifetime when it is created again.
	require.Equal(t, int64(1), rwRel(t, rc, "read", "r1"), "r1's release grants w1")
	require.Equal(t, int64(1), rwRel(t, rc, "write", "w1"), "w1's release grants r2")
	require.Equal(t, int64(0), rwAcq(t, rc, "write", "w2", "10000", false)[0], "w2 queues")
	check("after the keys came back", hour-5000, 4) // hash, readers, queue, places
	// A lease of 2 hours: the keys outlive it by the hour.
	require.Equal(t, int64(1), rwRel(t, rc, "read", "r2"), "r2's release grants w2")
	require.Equal(t, int64(3), rwAcq(t, rc, "write", "w2", "7200000", false)[0], "w2 claims its grant with a 2 h lease")
	check("after a 2 h lease", 3*hour-5000, 1)
}

// A read hold with a short lease taken after one with a long lease moves
// the point before which no read lease ends (rn) earlier: when the short
// one lapses, a writer gets in although the long one was released first.
func TestRWPruneAfterShortLease(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	require.Equal(t, int64(1), rwAcq(t, rc, "read", "long", "3600000", false)[0], "long reads")
	require.Equal(t, int64(1), rwAcq(t, rc, "read", "short", "50", false)[0], "short reads")
	require.Equal(t, int64(1), rwRel(t, rc, "read", "long"), "long's release")
	require.Eventually(t, func() bool {
		return rwAcq(t, rc, "write", "w", "10000", true)[0] == 1
	}, 5*time.Second, 10*time.Millisecond, "a writer gets in once the short read lease lapsed")
	require.NotContains(t, hash(t, rc, rwKeys[0]), "r:short", "the lapsed read hold is gone")
}

// Readers that wait are granted by the next write release, also after a
// release found none waiting (rq "0") and a reader waited again.
func TestRWWaitingReadersAgain(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	for i, r := range []string{"r1", "r2"} {
		require.Equal(t, int64(1), rwAcq(t, rc, "write", "w", "10000", false)[0], "round %d: w writes", i)
		require.Equal(t, int64(1), rwRel(t, rc, "write", "w"), "round %d: w's release, nobody waits", i)
		require.Equal(t, int64(1), rwAcq(t, rc, "write", "w", "10000", false)[0], "round %d: w writes", i)
		require.Equal(t, int64(0), rwAcq(t, rc, "read", r, "10000", false)[0], "round %d: %s waits", i, r)
		require.Equal(t, int64(1), rwRel(t, rc, "write", "w"), "round %d: w's release", i)
		h := hash(t, rc, rwKeys[0])
		require.Contains(t, h, "r:"+r, "round %d: %s granted: %v", i, r, h)
		require.Equal(t, "read", h["mode"], "round %d: %v", i, h)
		require.Equal(t, []int64{3, rwTok(t, h["r:"+r])}, rwAcq(t, rc, "read", r, "10000", false), "round %d: %s claims its grant", i, r)
		require.Equal(t, int64(1), rwRel(t, rc, "read", r), "round %d: %s's release", i, r)
	}
}

// rwTok is the token of a read hold's value "<count> <token>[ <wid>]".
func rwTok(t *testing.T, v string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^\d+ (\d+)`).FindStringSubmatch(v)
	require.NotNil(t, m, "read hold %q", v)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}

func hash(t *testing.T, rc rueidis.Client, k string) map[string]string {
	t.Helper()
	h, err := rc.Do(context.Background(), rc.B().Hgetall().Key(k).Build()).AsStrMap()
	require.NoError(t, err)
	return h
}

// The fair mutex's queue keys are set to live two place leases when a call
// creates one of them or less than one lease is left (one PTTL tells), so
// a waiter queueing behind others sets none; a queue key lost on its own
// gets its lifetime back when it is created again.
func TestFairQueueKeysLifetime(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	keys := []string{"p:{f}:fair", "p:{f}:fair:queue", "p:{f}:fair:places"}
	acq := func(owner string) []int64 {
		t.Helper()
		return ints(t, scripts.FairAcquire.Exec(ctx, rc, keys, []string{owner, "10000", "1000", "0", "p:{f}:fair:w:", "c" + owner + ".1"}))
	}
	ttl := func(k string) int64 {
		t.Helper()
		return num(t, rc.Do(ctx, rc.B().Pttl().Key(k).Build()))
	}
	require.Equal(t, int64(1), acq("a")[0], "a takes the lock")
	require.Equal(t, int64(0), acq("b")[0], "b queues")
	for _, k := range keys[1:] {
		require.Greater(t, ttl(k), int64(1000), "%s after the queue was created", k)
		require.LessOrEqual(t, ttl(k), int64(2000), "%s after the queue was created", k)
	}
	cmds := commands(t, rc, func() { require.Equal(t, int64(0), acq("c")[0], "c queues") })
	require.Zero(t, cmds["pexpire"], "queueing behind another: %v", cmds)
	require.Equal(t, 2, cmds["pttl"], "queueing behind another: one PTTL of the places, one of the lock (the wait): %v", cmds)
	// The places set lost: queueing makes it again, with its lifetime.
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(keys[2]).Build()).Error())
	require.Equal(t, int64(0), acq("d")[0], "d queues")
	require.Greater(t, ttl(keys[2]), int64(1000), "places made again")
	// Less than a lease left: a renewal sets both again.
	require.Eventually(t, func() bool { return ttl(keys[1]) < 1000 }, 3*time.Second, 20*time.Millisecond, "the queue's lifetime runs down")
	acq("d") // d renews its place
	for _, k := range keys[1:] {
		require.Greater(t, ttl(k), int64(1500), "%s after a renewal with less than a lease left", k)
	}
}
