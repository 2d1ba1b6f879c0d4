package dsync

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// The last read of Redis that a Mutex wait keeps for the waits after it
// (tagLock.remote) is theirs only while no hold of this Client has ended
// other than by a handoff inside it since (tagLock.gen). The count starts
// again when the lock's tagLock is dropped (nothing of it left) and made
// anew: a read that finished after that belonged to the old count, and
// must not pass for the new one. Before the fix it was kept with the old
// count, which the new one reached a hold-end later; a wait that found the
// lock held in Redis then took that stale read for current and missed
// every hold of another Client since: in examples/contention, a process's
// waiters linked to none of the 17 holds another process passed among its
// goroutines while they waited (the links explained 68-90% of the wait in
// 3 busy runs of 45).
func TestBlockersCacheNotAcrossTagLocks(t *testing.T) {
	s := redistest.Start(t)
	ctl := s.Client(t)
	st := &stuckTags{Client: s.Client(t), entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(st.release)
		}
	}()
	obs := Observer{HoldTag: func(context.Context, AcquireDone) string { return "tag" }}
	c, err := NewClient(st, WithKeyPrefix("cache"), WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	tg := c.tags
	key := c.NewMutex("m").key
	us := func() int64 { return wallUS(time.Now()) }
	endHold := func(tag string) { // a hold of this Client ended other than by a handoff inside it
		tg.endAt(&hold{key: key, rOwner: "o-" + tag}, &holdTag{tag: tag, val: strconv.FormatInt(us(), 10) + " " + tag, start: us()}, us(), false)
	}

	// A wait found the lock held in Redis; a hold of this Client ended
	// meanwhile (gen 1).
	n1 := &blockNote{start: time.Now()}
	tg.waiting(n1, key, true)
	endHold("h1")
	push := func(start int64, tag string) {
		e := strconv.FormatInt(us()+1, 10) + " " + strconv.FormatInt(start, 10) + " " + tag
		require.NoError(t, ctl.Do(context.Background(), ctl.B().Lpush().Key(histKey(key)).Element(e).Build()).Error())
	}
	push(us(), "before") // what n1's read finds
	// It got the lock: its read of Redis is held while the lock's
	// tagLock, with nothing left of it, is dropped and another wait makes
	// a new one.
	done := make(chan struct{})
	go func() {
		defer close(done)
		tg.collect(n1, KindMutex, true, -1)
	}()
	<-st.entered
	tg.mu.Lock()
	_, kept := tg.locks[key]
	tg.mu.Unlock()
	require.False(t, kept, "the tagLock was not dropped: nothing shown")
	n2 := &blockNote{start: time.Now()}
	tg.waiting(n2, key, true)
	close(st.release)
	released = true
	<-done
	// A hold of this Client ends (the new count's 1), and one of another
	// Client holds the lock during n2's wait: only Redis knows of it.
	endHold("h2")
	push(us(), "other")
	bs, _ := tg.collect(n2, KindMutex, true, -1)
	tags := make([]string, 0, len(bs))
	for _, b := range bs {
		tags = append(tags, b.Tag)
	}
	require.True(t, slices.Contains(tags, "other"), "the hold of another Client during the wait: blockers %v", tags)
}
