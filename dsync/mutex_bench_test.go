package dsync_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Quick in-package figures; the side-by-side comparison with the peers is
// in bench/.

func BenchmarkMutexSerial(b *testing.B) {
	c := newClient(b)
	m := c.NewMutex("serial")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lctx, err := m.LockContext(ctx)
		require.NoError(b, err)
		require.NoError(b, m.UnlockContext(lctx))
	}
}

func BenchmarkMutexContended16(b *testing.B) {
	c := newClient(b)
	m := c.NewMutex("contended")
	b.SetParallelism(8) // 8 x GOMAXPROCS(2) = 16 goroutines
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			lctx, err := m.LockContext(ctx)
			if !assert.NoError(b, err) {
				return
			}
			if !assert.NoError(b, m.UnlockContext(lctx)) {
				return
			}
		}
	})
}

// BenchmarkMutexParallel and BenchmarkRawParallel are the bench's parallel
// scenario in a go test (64 goroutines, a random name of 10,000 each
// cycle), so that a CPU profile shows where this process's time per cycle
// goes beside raw's (SET NX PX, then a compare-and-delete script), one
// benchmark per profile:
//
//	go test -run XXX -bench 'MutexParallel$' -benchtime 400000x -cpuprofile cpu.prof ./dsync/
func BenchmarkMutexParallel(b *testing.B) {
	c := newClient(b)
	ms := make([]*dsync.Mutex, 10000)
	for i := range ms {
		ms[i] = c.NewMutex("parallel:" + strconv.Itoa(i))
	}
	b.SetParallelism(32) // 32 x GOMAXPROCS(2) = 64 goroutines
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			m := ms[rand.IntN(len(ms))]
			lctx, err := m.LockContext(ctx)
			if !assert.NoError(b, err) {
				return
			}
			if !assert.NoError(b, m.UnlockContext(lctx)) {
				return
			}
		}
	})
}

func BenchmarkRawParallel(b *testing.B) {
	rc := newRueidis(b)
	del := rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "rawparallel:" + strconv.Itoa(i)
	}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			k, own := keys[rand.IntN(len(keys))], strconv.FormatUint(rand.Uint64(), 36)
			for {
				err := rc.Do(ctx, rc.B().Set().Key(k).Value(own).Nx().Px(10*time.Second).Build()).Error()
				if err == nil {
					break
				}
				if !assert.True(b, rueidis.IsRedisNil(err), "%v", err) {
					return
				}
				time.Sleep(time.Millisecond) // held: raw's 1 ms spin, as in the bench
			}
			if !assert.NoError(b, del.Exec(ctx, rc, []string{k}, []string{own}).Error()) {
				return
			}
		}
	})
}

// BenchmarkMutexGrant is the bench's handoff in one process: a Client
// holds, a wait of another Client is parked on the name, and 15 ms later
// the holder releases, which grants the lock to that wait in one hop.
// Reported per round, at p50: release-us, the holder's UnlockContext;
// handoff-us, from the release's start to the grantee's LockContext
// returning; redis-grant-us, the granting release's FCALL as Redis ran it
// (its SLOWLOG entry: the script's own time, without the round trip), and
// redis-release-us, the grantee's release (which grants nobody) likewise.
// Where the time of a handoff above the wake floor goes (docs/design.md):
//
//	go test -run XXX -bench MutexGrant -benchtime 100x ./dsync/
func BenchmarkMutexGrant(b *testing.B) {
	ctx := context.Background()
	p := testPrefix(b)
	ma := newClientOn(b, newRueidis(b), dsync.WithKeyPrefix(p)).NewMutex("grant")
	mb := newClientOn(b, newRueidis(b), dsync.WithKeyPrefix(p)).NewMutex("grant")
	adm := newRueidis(b)
	slowlog := func(below, keep string) {
		require.NoError(b, adm.Do(ctx, adm.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", below).ParameterValue("slowlog-max-len", keep).Build()).Error())
	}
	slowlog("0", "1024") // every command (those scripts run too)
	defer slowlog("10000", "128")
	var rel, hand, grant, plain []time.Duration
	for b.Loop() {
		la, err := ma.LockContext(ctx)
		require.NoError(b, err)
		require.NoError(b, adm.Do(ctx, adm.B().SlowlogReset().Build()).Error())
		got, done := make(chan time.Time, 1), make(chan struct{})
		go func() {
			defer close(done)
			lb, err := mb.LockContext(ctx)
			got <- time.Now()
			if assert.NoError(b, err) {
				assert.NoError(b, mb.UnlockContext(lb))
			}
		}()
		waitMarked(b, adm, p+":{grant}:mutex") // the wait is in Redis
		// Then the bench's handoff scenario's idle before the release (its
		// 15-20 ms; the CPUs idle as there), not a wait for a condition.
		time.Sleep(15 * time.Millisecond)
		t0 := time.Now()
		require.NoError(b, ma.UnlockContext(la))
		rel = append(rel, time.Since(t0))
		hand = append(hand, (<-got).Sub(t0))
		<-done
		// The log has two releases: the granting one, then the grantee's,
		// and no acquire between them (the grantee took the grant, not
		// the lock by a look of its own). SLOWLOG GET lists the newest
		// first.
		entries, err := adm.Do(ctx, adm.B().SlowlogGet().Count(1024).Build()).ToArray()
		require.NoError(b, err)
		var granting, grantees time.Duration
		n := 0
		for _, e := range entries {
			f, err := e.ToArray()
			require.NoError(b, err)
			args, err := f[3].AsStrSlice()
			require.NoError(b, err)
			if len(args) > 1 && args[0] == "FCALL" && strings.HasSuffix(args[1], "_mutex_acquire") {
				require.NotEqual(b, 1, n, "an acquire between the granting release and the grantee's: no one-hop grant")
			}
			if len(args) > 1 && args[0] == "FCALL" && strings.HasSuffix(args[1], "_mutex_release") {
				us, err := f[2].AsInt64()
				require.NoError(b, err)
				if n++; n == 1 {
					grantees = time.Duration(us) * time.Microsecond
				} else {
					granting = time.Duration(us) * time.Microsecond
				}
			}
		}
		require.Equal(b, 2, n, "FCALLs of the release in the SLOWLOG (the granting one, the grantee's)")
		grant, plain = append(grant, granting), append(plain, grantees)
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	b.ReportMetric(p50(rel), "release-us")
	b.ReportMetric(p50(hand), "handoff-us")
	b.ReportMetric(p50(grant), "redis-grant-us")
	b.ReportMetric(p50(plain), "redis-release-us")
	b.ReportMetric(0, "ns/op")
}
