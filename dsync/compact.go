package dsync

// Maps that give back their memory.

// compact returns m, or, when m is down to a quarter of its peak size and
// that peak was large, a copy sized for what is left. Go maps never give
// back the buckets of deleted entries: without this a burst of 100,000
// locks would keep its maps' memory for the Client's life. Call it after
// every insertion (it records the peak) and deletion; the copy costs O(n)
// once per peak/4 deletions, so O(1) amortized.
func compact[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	if n > *peak {
		*peak = n
		return m
	}
	if *peak < 1024 || n > *peak/4 {
		return m
	}
	fresh := make(map[K]V, n)
	for k, v := range m {
		fresh[k] = v
	}
	*peak = n
	return fresh
}
