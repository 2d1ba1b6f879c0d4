package main

import (
	"slices"
	"time"
)

// percentile returns the p-th percentile (0..100) of xs, nearest rank.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// jain is Jain's fairness index over per-worker counts: 1 when all got the
// same share, 1/n when one got everything.
func jain(counts []int64) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// interval is one hold: acquired and release-started, in Unix nanoseconds.
type interval [2]int64

// gaps merges holds (from any number of workers and processes) and returns
// the longest time the lock was free between holds, and how many free
// stretches exceeded limit. Every worker was waiting all the time, so a long
// free stretch is a liveness failure of the lib, not idleness.
func gaps(iv []interval, limit time.Duration) (longest time.Duration, stalls int) {
	if len(iv) == 0 {
		return 0, 0
	}
	s := slices.Clone(iv)
	slices.SortFunc(s, func(a, b interval) int { return int(a[0] - b[0]) })
	end := s[0][1]
	for _, x := range s[1:] {
		if g := time.Duration(x[0] - end); g > 0 {
			longest = max(longest, g)
			if g > limit {
				stalls++
			}
		}
		end = max(end, x[1])
	}
	return longest, stalls
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }
