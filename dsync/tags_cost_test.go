package dsync_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The uncontended cycle of a Mutex whose observer tags holds (issue 37's
// cost of tracing): the hold's tag is never written (it ends before the
// tagger's first send, tagDelay after it began), and its end goes to the
// lock's history in the release's own pipeline, ahead of the release: 2
// round trips and 11 commands a cycle (the untraced 6; tag_sync.lua's
// EVALSHA, LPUSH, LTRIM, LINDEX, PEXPIRE), no SCRIPT LOAD. Before: the
// tag changes were sent just before the release, each send a SCRIPT LOAD
// and an EVALSHA (rueidis' ExecMulti), writing the tag and removing it:
// 4 round trips and 21.8 commands a cycle, 1.9 SCRIPT LOAD. The bounds
// leave room for the few cycles whose hold outlasts tagDelay on a busy
// machine (their tag is written, then removed: 5 commands and a round
// trip in the background, and 3 more commands at the release): at most
// 14 commands and 2.5 round trips.
func TestMutexTracedCycleCost(t *testing.T) {
	s := redistest.Start(t)
	rc := &callCounter{Client: s.Client(t)}
	var seq atomic.Int64
	obs := dsync.Observer{
		HoldTag: func(context.Context, dsync.AcquireDone) string { return "h" + strconv.FormatInt(seq.Add(1), 10) },
	}
	prefix := testPrefix(t)
	c := newClientOn(t, rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs))
	ctx := ctxT(t)
	m := c.NewMutex("traced")
	cycle := func() {
		l, err := m.LockContext(ctx)
		require.NoError(t, err)
		require.NoError(t, m.UnlockContext(l))
	}
	cycle() // scripts loaded
	ctl := s.Client(t)
	resetStats(t, ctx, ctl, c)
	rc.calls.Store(0)
	const n = 500
	for range n {
		cycle()
	}
	trips := rc.calls.Load()
	total, info := commandCalls(t, ctx, ctl)
	per := float64(total) / n
	t.Logf("%.2f Redis commands and %.2f round trips per traced cycle", per, float64(trips)/n)
	assert.LessOrEqual(t, per, 14.0, "Redis commands per traced cycle:\n%s", info)
	assert.LessOrEqual(t, float64(trips)/n, 2.5, "round trips per traced cycle")
	assert.NotContains(t, info, "cmdstat_script|load", "a traced cycle loads no script:\n%s", info)
	// The history has the holds (the check found something to check).
	hist, err := ctl.Do(ctx, ctl.B().Llen().Key(prefix+":{traced}:mutex:taghist").Build()).AsInt64()
	require.NoError(t, err)
	assert.Positive(t, hist, "the lock's history has the ended holds")
}

// callCounter counts the calls (each one round trip) sent through it.
type callCounter struct {
	rueidis.Client
	calls atomic.Int64
}

func (r *callCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.count(cmd)
	return r.Client.Do(ctx, cmd)
}

func (r *callCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if len(multi) > 0 {
		r.count(multi[0])
	}
	return r.Client.DoMulti(ctx, multi...)
}

func (r *callCounter) count(cmd rueidis.Completed) {
	// The renewal loop's and the notifier's calls are not the cycle's.
	if cs := cmd.Commands(); len(cs) > 0 && !strings.EqualFold(cs[0], "SUBSCRIBE") && !strings.EqualFold(cs[0], "PING") {
		r.calls.Add(1)
	}
}
