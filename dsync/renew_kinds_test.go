package dsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptCounter wraps a rueidis.Client and records the script calls the
// dsync Client sends: per pipeline (the renewer's rounds) and alone.
type scriptCounter struct {
	rueidis.Client
	mu     sync.Mutex
	rounds []int // EVALSHA/EVAL calls of each pipeline that had any
	alone  int   // EVALSHA/EVAL calls sent alone
}

func isScript(c rueidis.Completed) bool {
	cs := c.Commands()
	return len(cs) > 0 && (cs[0] == "EVALSHA" || cs[0] == "EVAL")
}

func (s *scriptCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if isScript(cmd) {
		s.mu.Lock()
		s.alone++
		s.mu.Unlock()
	}
	return s.Client.Do(ctx, cmd)
}

func (s *scriptCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	n := 0
	for _, c := range multi {
		if isScript(c) {
			n++
		}
	}
	if n > 0 {
		s.mu.Lock()
		s.rounds = append(s.rounds, n)
		s.mu.Unlock()
	}
	return s.Client.DoMulti(ctx, multi...)
}

func (s *scriptCounter) reset() {
	s.mu.Lock()
	s.rounds, s.alone = nil, 0
	s.mu.Unlock()
}

func (s *scriptCounter) seen() ([]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.rounds...), s.alone
}

// Every kind of hold is renewed by the Client's one renewer in batches:
// 10 holds each of Mutex, FairMutex, RWMutex read and write, Semaphore,
// Once and Group runs and Election terms (80 holds and 10 term records)
// cost one batch script per kind and round, in the round's one pipeline:
// at most 5 scripts (the mutex layout's, RWMutex's, Semaphore's, the runs'
// and the term records'), and no script sent alone (an Election term had a
// ticker of its own, and each RWMutex, Semaphore and run hold a script of
// its own each round). With the Client's renewal session (the default off
// a Cluster) the Mutex holds have a batch script of their own (the
// session's, mutex_renew_session.lua): at most 6.
func TestRenewalBatchesEveryKind(t *testing.T) {
	for _, mode := range []struct {
		name    string
		every   int
		scripts int
	}{{"session", 5, 6}, {"no-session", 0, 5}} {
		t.Run(mode.name, func(t *testing.T) { testRenewalBatchesEveryKind(t, mode.every, mode.scripts) })
	}
}

func testRenewalBatchesEveryKind(t *testing.T, every, most int) {
	s := redistest.Start(t)
	counter := &scriptCounter{Client: s.Client(t)}
	c := newClientOn(t, counter, dsync.WithLease(900*time.Millisecond), dsync.WithSessionEvery(every))
	ctx := ctxT(t)
	park := make(chan struct{})
	var runs sync.WaitGroup
	t.Cleanup(runs.Wait)
	t.Cleanup(func() { close(park) })
	const each = 10
	var (
		mu    sync.Mutex
		lctxs []context.Context // every hold's context
	)
	held := func(lctx context.Context, err error) {
		t.Helper()
		require.NoError(t, err)
		mu.Lock()
		lctxs = append(lctxs, lctx)
		mu.Unlock()
	}
	for i := range each {
		name := func(kind string) string { return fmt.Sprintf("%s%d", kind, i) }
		held(c.NewMutex(name("m")).LockContext(ctx))
		held(c.NewFairMutex(name("f")).LockContext(ctx))
		held(c.NewRWMutex(name("r")).RLockContext(ctx))
		held(c.NewRWMutex(name("w")).LockContext(ctx))
		held(c.NewSemaphore(name("s"), 3).Acquire(ctx, 2))
		held(c.NewElection(name("e")).Campaign(ctx, "v"))
		started := make(chan struct{}, 2)
		f := func(rctx context.Context) error {
			held(rctx, nil)
			started <- struct{}{}
			<-park
			return nil
		}
		runs.Add(2)
		go func() {
			defer runs.Done()
			_ = c.NewOnce(name("o")).Do(ctx, f)
		}()
		go func() {
			defer runs.Done()
			_, _, _ = dsync.NewGroup[int](c, name("g")).Do(ctx, "k", func(ctx context.Context) (int, error) { return 0, f(ctx) })
		}()
		<-started
		<-started
	}
	counter.reset()
	waitFor(t, 10*time.Second, "4 renewal rounds", func() bool {
		rounds, _ := counter.seen()
		return len(rounds) >= 4
	})
	rounds, alone := counter.seen()
	t.Logf("script calls per round: %v; sent alone: %d", rounds, alone)
	for _, n := range rounds {
		assert.LessOrEqual(t, n, most, "a round of %d holds of 8 kinds sent %d scripts: not every kind is batched", 8*each, n)
	}
	assert.Zero(t, alone, "renewal scripts sent alone (an Election term's own ticker?)")
	// Nothing was lost on the way: rounds of a lease/3 over more than a
	// lease renewed every hold.
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, lctxs, 8*each)
	for i, lctx := range lctxs {
		assert.NoError(t, lctx.Err(), "hold %d lost", i)
	}
}

// A batch renews or loses each of its holds exactly: of two RWMutex read
// holds, two write holds and two Semaphore acquisitions of one Client, one
// of each is forced free; their lock contexts end with ErrLockLost and the
// others' live on through later renewal rounds.
func TestRenewalBatchLosesEachHoldExactly(t *testing.T) {
	s := redistest.Start(t)
	counter := &scriptCounter{Client: s.Client(t)}
	c := newClientOn(t, counter, dsync.WithLease(900*time.Millisecond))
	other := newClientOn(t, s.Client(t))
	ctx := ctxT(t)
	take := func(lctx context.Context, err error) context.Context {
		t.Helper()
		require.NoError(t, err)
		return lctx
	}
	type pair struct{ kept, forced context.Context }
	pairs := map[string]pair{
		"read":  {take(c.NewRWMutex("r1").RLockContext(ctx)), take(c.NewRWMutex("r0").RLockContext(ctx))},
		"write": {take(c.NewRWMutex("w1").LockContext(ctx)), take(c.NewRWMutex("w0").LockContext(ctx))},
		"sem":   {take(c.NewSemaphore("s1", 2).Acquire(ctx, 1)), take(c.NewSemaphore("s0", 2).Acquire(ctx, 1))},
	}
	for _, name := range []string{"r0", "w0", "s0"} {
		released, err := other.ForceUnlock(ctx, name)
		require.NoError(t, err)
		require.NotEmpty(t, released, name)
	}
	for kind, p := range pairs {
		waitFor(t, 5*time.Second, kind+" forced hold lost", func() bool { return p.forced.Err() != nil })
		assert.ErrorIs(t, context.Cause(p.forced), dsync.ErrLockLost, kind)
	}
	// Four more rounds (a lease/3 each, more than a lease in all): the
	// kept holds were renewed, or their lease clocks would have run out.
	counter.reset()
	waitFor(t, 10*time.Second, "4 renewal rounds", func() bool {
		rounds, _ := counter.seen()
		return len(rounds) >= 4
	})
	for kind, p := range pairs {
		assert.NoError(t, p.kept.Err(), "%s hold lost with its batch mate", kind)
	}
}
