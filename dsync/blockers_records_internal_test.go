package dsync

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// blockers keeps, of a wait's records, those that held the lock during it,
// each hold once, an ended record over a current one of the same hold
// even when the ended one is from a read of Redis and ended before the
// wait (then the hold did not block it); Redis's older history entries,
// which most of a read (or of the cached last read) are, cost nothing.
func TestBlockersFromRecords(t *testing.T) {
	const ws, we = 1000, 2000
	old := make([]blockRec, 0, maxHistory)
	for i := range maxHistory - 4 {
		// All before the wait, whatever maxHistory is.
		st := int64(i) * 900 / maxHistory
		old = append(old, blockRec{tag: "old" + string(rune('a'+i%26)), start: st, end: st + 5})
	}
	local := []blockRec{
		{tag: "l1", start: 900, end: 1200},  // ended during the wait
		{tag: "l2", start: 1200, end: 1500}, // inside it
		{tag: "gone", start: 1500},          // current here, ended in Redis before the wait
		{tag: "both", start: 1500},          // current here, ended in Redis during the wait
		{tag: "l3", start: 100, end: 900},   // before the wait: not a blocker
	}
	remote := append(old,
		blockRec{tag: "gone", start: 500, end: 800},
		blockRec{tag: "both", start: 1500, end: 1700},
		blockRec{tag: "r1", start: 1700},            // current in Redis
		blockRec{tag: "l2", start: 1200, end: 1500}, // this Client's, also in Redis
	)
	got, dropped := blockers(ws, we, local, remote)
	assert.Zero(t, dropped)
	var tags []string
	var overlaps []time.Duration
	for _, b := range got {
		tags = append(tags, b.Tag)
		overlaps = append(overlaps, b.Overlap)
	}
	us := time.Microsecond
	assert.Equal(t, []string{"l1", "l2", "both", "r1"}, tags)
	assert.Equal(t, []time.Duration{200 * us, 300 * us, 200 * us, 300 * us}, overlaps)

	got, _ = blockers(ws, we, nil, old)
	assert.Empty(t, got, "history entries that ended before the wait are no blockers")
}

// Beyond MaxBlockers holds, a wait keeps those that held the lock for the
// most of it, in the order they began, and counts the rest as dropped.
func TestBlockersBeyondMax(t *testing.T) {
	const extra = 10
	var recs []blockRec
	for i := range MaxBlockers + extra {
		// Hold i starts at 10i and lasts i+1 µs: the first extra overlap least.
		recs = append(recs, blockRec{tag: "h" + strconv.Itoa(i), start: int64(10 * i), end: int64(10*i + i + 1)})
	}
	got, dropped := blockers(0, 100000, recs, nil)
	assert.Equal(t, extra, dropped)
	if assert.Len(t, got, MaxBlockers) {
		for i, b := range got {
			assert.Equal(t, "h"+strconv.Itoa(i+extra), b.Tag, "blocker %d", i)
		}
	}
}
