package dsync_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a Group call costs: 3 Clients x 20 goroutines call one key at once,
// 20 rounds (one key each), on a private server, counted by the server
// (INFO commandstats, commands inside scripts included). fn runs once per
// round, and the callers of one Client share one wait in Redis, so the
// scripts per call stay far below one.
func TestGroupCosts(t *testing.T) {
	s := redistest.Start(t)
	const clients, goroutines, rounds = 3, 20, 20
	var gs []*dsync.Group[int]
	var cs []*dsync.Client
	for range clients {
		c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("cost"))
		gs = append(gs, dsync.NewGroup[int](c, "g"))
		cs = append(cs, c)
	}
	ctx := ctxT(t)
	rc := s.Client(t)
	_, _, err := gs[0].Do(ctx, "warm", func(context.Context) (int, error) { return 0, nil }) // scripts loaded
	require.NoError(t, err)
	resetStats(t, ctx, rc, cs...)
	var runs atomic.Int64
	for r := range rounds {
		key := "k" + strconv.Itoa(r)
		var wg sync.WaitGroup
		for _, g := range gs {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, _, err := g.Do(ctx, key, func(context.Context) (int, error) {
						runs.Add(1)
						// Every caller joins: all in Do, the other
						// Clients waiting in Redis (counted with ZCOUNT,
						// which no script uses, and left out below).
						waitFor(t, 10e9, "every caller", func() bool {
							for _, g := range gs {
								if dsync.GroupCallers(g, key) != goroutines {
									return false
								}
							}
							n, err := rc.Do(ctx, rc.B().Zcount().Key("cost:{g}:group:w:"+key).Min("-inf").Max("+inf").Build()).AsInt64()
							return err == nil && n == clients-1
						})
						return r, nil
					})
					assert.NoError(t, err)
					assert.Equal(t, r, v)
				}()
			}
		}
		wg.Wait()
	}
	total, info := commandCalls(t, ctx, rc)
	total -= statCalls(info, "zcount")
	scripts := statCalls(info, "evalsha") + statCalls(info, "eval")
	calls := float64(clients * goroutines * rounds)
	t.Logf("%v calls, %d runs of fn: %.1f calls per run; %.3f scripts and %.3f Redis commands per call (%.1f commands per Client and round)\n%s",
		calls, runs.Load(), calls/float64(runs.Load()), float64(scripts)/calls, float64(total)/calls, float64(total)/clients/rounds, info)
	require.Equal(t, int64(rounds), runs.Load(), "runs of fn")
	assert.LessOrEqual(t, float64(scripts)/calls, 0.15, "scripts per call: 60 callers share 3 waits")
	left, err := rc.Do(ctx, rc.B().Keys().Pattern("cost:{g}:group*").Build()).AsStrSlice()
	require.NoError(t, err)
	require.Empty(t, left, "keys left")
}

// statCalls reads one command's calls from INFO commandstats.
func statCalls(info, cmd string) int {
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
