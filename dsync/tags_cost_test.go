package dsync_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
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

// A release whose first try gets no answer (the connection broke before
// the pipeline went out) is sent again (idempotent), and the hold-tag
// changes that went in its pipeline go again with it: the lock's history
// has the released hold, so a waiter of another Client finds it. Before:
// the changes were taken as sent by the first try and lost with it (the
// history stayed empty).
func TestTracedReleaseRetrySendsTags(t *testing.T) {
	s := redistest.Start(t)
	tagSync, _ := scripts.SHA1(scripts.TagSync)
	rc := &failFirstTags{Client: s.Client(t), sha: tagSync}
	var seq atomic.Int64
	obs := dsync.Observer{
		HoldTag: func(context.Context, dsync.AcquireDone) string { return "h" + strconv.FormatInt(seq.Add(1), 10) },
	}
	prefix := testPrefix(t)
	c := newClientOn(t, rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs))
	ctx := ctxT(t)
	m := c.NewMutex("retry")
	l, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(l))
	require.EqualValues(t, 1, rc.failed.Load(), "the release's first pipeline failed")
	ctl := s.Client(t)
	hist, err := ctl.Do(ctx, ctl.B().Lrange().Key(prefix+":{retry}:mutex:taghist").Start(0).Stop(-1).Build()).AsStrSlice()
	require.NoError(t, err)
	require.Len(t, hist, 1, "the released hold is in the lock's history")
	assert.True(t, strings.HasSuffix(hist[0], " h1"), "the entry is the hold's: %q", hist[0])
	c2 := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix))
	l2, ok, err := c2.NewMutex("retry").TryLockContext(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "the lock is released")
	if ok {
		require.NoError(t, c2.NewMutex("retry").UnlockContext(l2))
	}
}

// failFirstTags fails, without sending it, the first pipeline that starts
// with a tag_sync.lua EVALSHA (the tag changes sent ahead of a release),
// as a broken connection would.
type failFirstTags struct {
	rueidis.Client
	sha    string
	failed atomic.Int64
}

func (r *failFirstTags) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if cs := multi[0].Commands(); len(multi) > 1 && len(cs) > 1 && strings.EqualFold(cs[0], "EVALSHA") && cs[1] == r.sha && r.failed.CompareAndSwap(0, 1) {
		res := make([]rueidis.RedisResult, len(multi))
		for i := range res {
			res[i] = rueidis.NewErrorResult(io.ErrUnexpectedEOF)
		}
		return res
	}
	return r.Client.DoMulti(ctx, multi...)
}
