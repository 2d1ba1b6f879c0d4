package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be a worker process of run.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := child(spec, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestContention runs the example small (3 processes x 3 goroutines) and
// checks that the spans alone explain at least 95% of the waiting behind
// holders: the acquisitions that waited behind holders are linked to
// their blockers (at least 95% of them), whose hold spans, in whichever
// process, cover at least 95% of that waiting; and that the blockers are
// the workers' Clients, each with the wait it caused. An acquisition
// waited behind holders when its span overlapped another owner's hold
// span and something held it up: it queued in its Client, or sent more
// than one script. One whose only script found the lock free (a hold's
// span ends when its release's reply is back in its process, after the
// release ran in Redis) has nothing to link, and must carry no link.
func TestContention(t *testing.T) {
	// A real redis-server where there is one (the embedded server is slow
	// enough under the race detector to make every call a wait).
	if s, err := redistest.StartServer(); err == nil {
		t.Cleanup(s.Stop)
		t.Setenv("REDIS_ADDR", s.Addr)
	} else if os.Getenv("CI") != "" {
		t.Fatalf("redis-server is required under CI: %v", err)
	}
	var b strings.Builder
	rep, err := run(&b, 3, 3, 10)
	require.NoError(t, err)
	t.Log("\n" + b.String())
	assert.Equal(t, 3*3*10, rep.acquired, "acquisitions")
	require.Positive(t, rep.waited, "no acquisition waited behind a holder: 9 workers on 3 locks must contend")
	assert.GreaterOrEqual(t, float64(rep.linked)/float64(rep.waited), 0.95, "waits linked to a blocker: %d of %d", rep.linked, rep.waited)
	assert.GreaterOrEqual(t, rep.fraction(), 0.95, "the waiting the linked holds explain: %v of %v", rep.explained, rep.wait)
	// Those that overlapped a hold but were held up by nobody (one
	// script, no queue: see report.alone) have nothing to link.
	assert.Zero(t, rep.aloneLinked, "acquisitions held up by nobody with a blocked_by link, of %d", rep.alone)
	require.NotEmpty(t, rep.blockers, "no blocker")
	owner := regexp.MustCompile(`^proc-[0-2]/[0-9a-f]+$`)
	var caused time.Duration
	for _, bl := range rep.blockers {
		assert.Regexp(t, owner, bl.owner, "blocker %+v: owner", bl)
		assert.Equal(t, bl.owner[:len("proc-0")], bl.client, "blocker %+v: client name", bl)
		assert.Contains(t, []string{"orders", "inventory", "billing"}, bl.lock, "blocker %+v: lock", bl)
		assert.Positive(t, bl.caused, "blocker %+v: wait caused", bl)
		caused += bl.caused
	}
	// One holder at a time: the wait caused, summed, is about the waiting
	// the holds explain. It may be more: a hold whose end had not reached
	// Redis when the waiter read it counts as held until the waiter's end.
	t.Logf("wait caused (blocked_for summed) %v, explained by the spans %v: %.3f", caused, rep.explained, float64(caused)/float64(max(rep.explained, 1)))
	assert.GreaterOrEqual(t, float64(caused), 0.9*float64(rep.explained), "wait caused %v, explained %v", caused, rep.explained)
	assert.LessOrEqual(t, float64(caused), 1.25*float64(rep.explained), "wait caused %v, explained %v", caused, rep.explained)
	assert.Contains(t, b.String(), rep.blockers[0].owner, "top blocker missing from the printed report")
}

// TestAnalyse checks the reading of the links and the arithmetic on spans
// made by hand.
func TestAnalyse(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	spans := []span{
		{Hold: true, ID: "ha", Lock: "x", Owner: "proc-0/aa", Start: ms(0), End: ms(10)},
		{Hold: true, ID: "hb", Lock: "x", Owner: "proc-1/bb", Start: ms(10), End: ms(16)},
		{Hold: true, ID: "hc", Lock: "y", Owner: "proc-0/cc", Start: ms(0), End: ms(4)},
		// Waited 2..16 behind a (8 ms) then b (6 ms): all explained.
		{ID: "w1", Lock: "x", Owner: "proc-2/w1", Start: ms(2), End: ms(16), Acquired: true, Attempts: 3,
			Links: []link{{ID: "ha", For: 0.008}, {ID: "hb", For: 0.006}}},
		// Waited 1..6 behind c (3 ms: 1..4), then 2 ms for nobody.
		{ID: "w2", Lock: "y", Owner: "proc-1/w2", Start: ms(1), End: ms(6), Acquired: true, Attempts: 2, Links: []link{{ID: "hc", For: 0.003}}},
		// Slow with nobody in the way: not a wait behind holders.
		{ID: "w3", Lock: "z", Owner: "proc-1/w3", Start: ms(0), End: ms(2), Acquired: true, Attempts: 1},
		// Gave up: not an acquisition.
		{ID: "w4", Lock: "x", Owner: "proc-1/w4", Start: ms(0), End: ms(9), Attempts: 2, Links: []link{{ID: "ha", For: 0.009}}},
		// Waited behind b (15..16), but its link is to a span outside
		// those collected: linked, explains nothing.
		{ID: "w5", Lock: "x", Owner: "proc-1/w5", Start: ms(15), End: ms(17), Acquired: true, Attempts: 2, Links: []link{{ID: "zz", For: 0.001}}},
		// Waited behind a (9..10) without a link, in its Client's queue
		// (handed the lock there: no script).
		{ID: "w6", Lock: "x", Owner: "proc-1/w6", Start: ms(9), End: ms(10), Acquired: true, Queued: true},
		// Overlapped c (3..4) and then took 1.5 ms, with one script and
		// no queue: held up by nobody, and slow; with a link (there is
		// nothing to link: counted apart).
		{ID: "w7", Lock: "y", Owner: "proc-2/w7", Start: ms(3), End: ms(3) + 1500000, Acquired: true, Attempts: 1},
		{ID: "w8", Lock: "y", Owner: "proc-2/w8", Start: ms(3), End: ms(4), Acquired: true, Attempts: 1, Links: []link{{ID: "hc", For: 0.001}}},
		// Overlapped c (2..4) with one script, after queueing in its
		// Client: a wait behind c, without a link.
		{ID: "w9", Lock: "y", Owner: "proc-0/w9", Start: ms(2), End: ms(4), Acquired: true, Attempts: 1, Queued: true},
	}
	r := analyse(spans)
	assert.Equal(t, 8, r.acquired, "acquired")
	assert.Equal(t, 5, r.waited, "waited behind holders")
	assert.Equal(t, 3, r.linked, "linked")
	assert.Equal(t, 2, r.alone, "overlapped a hold, held up by nobody")
	assert.Equal(t, 1, r.aloneLinked, "overlapped a hold, held up by nobody, linked")
	assert.Equal(t, 2, r.slow, "slow, no holder in the way")
	assert.Equal(t, 3500*time.Microsecond, r.slowWait, "slow, no holder in the way: 2 + 1.5")
	assert.Equal(t, 21*time.Millisecond, r.wait, "waiting behind holders: 14 + 3 + 1 + 1 + 2")
	assert.Equal(t, 17*time.Millisecond, r.explained, "explained")
	require.Len(t, r.blockers, 3, "blockers %+v", r.blockers)
	assert.Equal(t, blocker{client: "proc-0", owner: "proc-0/aa", lock: "x", caused: 8 * time.Millisecond, holds: 1}, r.blockers[0])
	assert.Equal(t, blocker{client: "proc-1", owner: "proc-1/bb", lock: "x", caused: 6 * time.Millisecond, holds: 1}, r.blockers[1])
	assert.Equal(t, blocker{client: "proc-0", owner: "proc-0/cc", lock: "y", caused: 3 * time.Millisecond, holds: 1}, r.blockers[2])
}
