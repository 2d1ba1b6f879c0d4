package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// keysCycles is how many lock+unlock cycles of one name the keys scenario
// runs before it counts the keys left (issue 14: "keys left after 1,000
// cycles of one name").
const keysCycles = 1000

// keysLeft runs cycles lock+unlock cycles of one name, one goroutine, on a
// lib whose every key is under prefix (a Client of its own with
// WithKeyPrefix(prefix); for raw, the key prefix:name), and then, the lock
// released and the Client still open, counts the keys under prefix with
// SCAN: what the acquisitions left behind in Redis. Nothing else writes
// under prefix, so every key found is the lib's, of that one name.
func keysLeft(e *env, spec libSpec, prefix string, cycles int) (sample, error) {
	if strings.ContainsAny(prefix, `*?[]\{}`) {
		return nil, fmt.Errorf("keys: prefix %q has glob or hash-tag characters", prefix)
	}
	l, err := spec.keyed(e.addr, prefix, new(atomic.Int64))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	defer l.close()
	h := l.handle("k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range cycles {
		if err := h.Lock(ctx); err != nil {
			return nil, err
		}
		if err := h.Unlock(ctx); err != nil {
			return nil, err
		}
	}
	keys, err := scanKeys(ctx, e, prefix+":*")
	if err != nil {
		return nil, err
	}
	s := sample{"cycles": float64(cycles), "keys_left": float64(len(keys)), "keys_no_ttl": 0, "keys_max_ttl_s": 0}
	kinds := map[string]int{}
	for _, k := range keys {
		ttl, err := e.ctl.Do(ctx, e.ctl.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			return nil, err
		}
		switch {
		case ttl == -1:
			s["keys_no_ttl"]++
		case ttl > 0:
			s["keys_max_ttl_s"] = max(s["keys_max_ttl_s"], float64(ttl)/1000)
		}
		kinds[keyKind(strings.TrimPrefix(k, prefix))]++
	}
	for kind, n := range kinds {
		s["keys "+kind] = float64(n)
	}
	if len(keys) > 0 {
		names := make([]string, 0, len(kinds))
		for kind, n := range kinds {
			names = append(names, fmt.Sprintf("%s x%d", kind, n))
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "  %s: %d keys left after %d cycles: %s\n", spec.name, len(keys), cycles, strings.Join(names, ", "))
	}
	return s, nil
}

// keyKind names a key by its first segments after the prefix, with the
// rest (an owner or attempt id) as "*": ":{k}:mutex:a:<id>" -> "{k}:mutex:a:*".
func keyKind(rest string) string {
	parts := strings.Split(strings.TrimPrefix(rest, ":"), ":")
	if len(parts) > 3 {
		return strings.Join(parts[:3], ":") + ":*"
	}
	return strings.Join(parts, ":")
}

// scanKeys returns every key matching the glob pattern, once each (SCAN,
// so the server is never blocked for long; SCAN may return a key twice).
func scanKeys(ctx context.Context, e *env, pattern string) ([]string, error) {
	seen := map[string]bool{}
	var keys []string
	var cursor uint64
	for {
		se, err := e.ctl.Do(ctx, e.ctl.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, k := range se.Elements {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if se.Cursor == 0 {
			return keys, nil
		}
		cursor = se.Cursor
	}
}
