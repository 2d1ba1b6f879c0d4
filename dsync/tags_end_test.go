package dsync_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A released hold's history entry ends when Redis let the lock go, not
// when the release was sent: with Redis paused while the release is on its
// way, the entry's end is after the pause, so a waiter of another Client
// whose wait began meanwhile is linked to the hold for that time too
// (before the fix the entry ended at the send, a round trip early: the
// whole pause here). For the locks whose release ends the hold in Redis
// (a Semaphore's hold ends when its Release returns, by its own clock).
func TestReleasedHoldEndsAtRedisClock(t *testing.T) {
	const pause = time.Second
	s := redistest.Start(t) // private: CLIENT PAUSE stalls every client of it
	ctl := s.Client(t)
	ctx := ctxT(t)
	// The rows whose release ends the hold in Redis, as the contract
	// tests open them.
	rows := map[string]bool{"Mutex": true, "FairMutex": true, "RWMutexWrite": true}
	ran := 0
	for _, row := range contractRows() {
		if !rows[row.name] {
			continue
		}
		ran++
		t.Run(row.name, func(t *testing.T) {
			prefix := testPrefix(t)
			c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(prefix), dsync.WithObserver(tagObserver("held")))
			l := row.open(c, "end")
			lctx, err := l.lock(ctx)
			require.NoError(t, err)
			waitFor(t, 5*time.Second, "the hold's tag in Redis", func() bool { return len(tagFields(t, ctl, prefix)) > 0 })
			paused := time.Now()
			require.NoError(t, ctl.Do(ctx, ctl.B().ClientPause().Timeout(pause.Milliseconds()).All().Build()).Error())
			sent := time.Now()
			require.NoError(t, l.unlock(lctx))
			require.Less(t, sent.Sub(paused), pause/2, "the release was sent late in the pause: nothing shown")
			keys, err := ctl.Do(ctx, ctl.B().Keys().Pattern(prefix+":*:taghist").Build()).AsStrSlice()
			require.NoError(t, err)
			require.Len(t, keys, 1, "the lock's history")
			hist, err := ctl.Do(ctx, ctl.B().Lrange().Key(keys[0]).Start(0).Stop(-1).Build()).AsStrSlice()
			require.NoError(t, err)
			require.Len(t, hist, 1, "the released hold's entry")
			f := strings.Fields(hist[0])
			require.Len(t, f, 3, "entry %q: <end µs> <start µs> <tag>", hist[0])
			end, err := strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
			require.Equal(t, "held", f[2], "entry %q", hist[0])
			at := time.UnixMicro(end)
			require.False(t, at.Before(paused.Add(pause)), "the entry ends %v after the release was sent, before Redis ran it (%v after the pause began, which lasted %v)", at.Sub(sent), at.Sub(paused), pause)
		})
	}
	require.Equal(t, len(rows), ran, "rows run")
}
