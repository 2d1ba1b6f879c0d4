package dsync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bound hold is written at its phase's turn, every fifth round, while
// rounds are quick; when rounds take longer than the interval between
// them (latency: a round is two round trips), its phase is written early
// enough that the backstop outlasts the next round's replies.
// TestFaultNetworkLatency is the end-to-end case (lease 1 s, 300 ms round
// trips: without sessionLate the hold was lost in 3 of 3 runs).
func TestSessionLate(t *testing.T) {
	const lease = time.Second
	r := &renewer{c: &Client{cfg: config{lease: lease}}}
	now := time.Now()
	// Quick rounds (interval lease/3): written four rounds ago, the
	// hold's turn comes at the next round (5/3 lease), with 2/3 lease of
	// its backstop (7/3 lease) to spare.
	r.sess.took = 2 * time.Millisecond
	require.False(t, r.sessionLate(now.Add(-4*lease/3), now), "quick rounds, written four rounds ago")
	require.False(t, r.sessionLate(now.Add(-lease/3), now), "quick rounds, written a round ago")
	// Past its turn (a failed round): written now.
	require.True(t, r.sessionLate(now.Add(-5*lease/3-lease/9), now), "quick rounds, written 5/3+1/9 lease ago")
	// Rounds of 600 ms: written two rounds ago, the next round's replies
	// (1.2 s on) plus a third of a lease outrun the backstop.
	r.sess.took = 600 * time.Millisecond
	require.True(t, r.sessionLate(now.Add(-1200*time.Millisecond), now), "600 ms rounds, written two rounds ago")
	require.False(t, r.sessionLate(now.Add(-600*time.Millisecond), now), "600 ms rounds, written a round ago")
	require.False(t, r.sessionLate(now, now), "600 ms rounds, written now")
}
