package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		counts []int64
		want   float64
	}{
		{[]int64{5, 5, 5, 5}, 1},
		{[]int64{8, 0, 0, 0}, 0.25},
		{[]int64{2, 1}, 0.9},
		{[]int64{0, 0}, 0},
	} {
		got := jain(tc.counts)
		assert.LessOrEqual(t, math.Abs(got-tc.want), 1e-9, "jain(%v) = %v, want %v", tc.counts, got, tc.want)
	}
}

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 100; i >= 1; i-- { // unsorted input must not matter
		xs = append(xs, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 0: 1} {
		assert.Equal(t, want, percentile(xs, p), "p%v", p)
	}
	assert.Equal(t, time.Duration(100), xs[0], "percentile sorted its input in place")
	assert.Equal(t, time.Duration(0), percentile(nil, 99), "percentile of nothing is not 0")
}

func TestMedian(t *testing.T) {
	assert.Equal(t, float64(2), median([]float64{3, 1, 2}), "median odd")
	assert.Equal(t, 2.5, median([]float64{4, 1, 2, 3}), "median even")
}

// A free stretch is measured from the latest release of all earlier holds,
// not the previous hold's, and holds from several workers overlap.
func TestGaps(t *testing.T) {
	s := int64(time.Second)
	iv := []interval{{0, 10 * s}, {2 * s, 3 * s}, {13 * s, 14 * s}, {14*s + 1, 15 * s}, {15 * s, 16 * s}}
	longest, stalls := gaps(iv, 2*time.Second)
	assert.Equal(t, 3*time.Second, longest, "gaps: the longest free stretch")
	assert.Equal(t, 1, stalls, "gaps: stalls")
	_, stalls = gaps(iv, 3*time.Second)
	assert.Equal(t, 0, stalls, "a gap equal to the limit counted as a stall")
}

func TestMergeHolds(t *testing.T) {
	ms := int64(time.Millisecond)
	got := mergeHolds([]interval{{5 * ms, 6 * ms}, {0, ms}, {ms + 1, 2 * ms}, {10 * ms, 11 * ms}})
	want := []interval{{0, 2 * ms}, {5 * ms, 6 * ms}, {10 * ms, 11 * ms}}
	require.Equal(t, want, got, "merged")
	// Merging must not hide a free stretch longer than mergeGap.
	l, _ := gaps(got, time.Second)
	assert.Equal(t, 4*time.Millisecond, l, "longest gap after merge")
}
