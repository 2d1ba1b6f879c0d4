package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// workResult is what a set of contending workers did until stopAt.
type workResult struct {
	Counts   []int64         `json:"counts"` // acquisitions per worker that returned before stopAt
	Waits    []time.Duration `json:"waits"`  // wait of each counted acquisition and of each wait cut off at stopAt (maybe a stride sample)
	Holds    []interval      `json:"holds"`  // holds, merged where less than mergeGap apart
	Total    int64           `json:"total"`  // every acquisition, for the cost per acquisition
	Errs     int64           `json:"errs"`
	FirstErr string          `json:"first_err,omitempty"`
	RT       int64           `json:"rt"`              // client round trips, filled by the caller
	Spans    *spanDump       `json:"spans,omitempty"` // the traced lib's spans (an xproc child's)
	Acqs     []interval      `json:"-"`               // every counted acquisition's wait (start, acquired), for tailOf
	Tokens   []uint64        `json:"-"`               // their fencing tokens, if the lib tells them (tokener)
}

// mergeGap: holds closer than this are merged before they are shipped or
// scanned for stalls; only free stretches of seconds matter there.
const mergeGap = int64(time.Millisecond)

// maxWaits bounds the waits a child sends back; a stride sample keeps the
// percentiles.
const maxWaits = 50000

// work runs one worker per handle: lock, record, unlock, until stopAt. A
// wait still running at stopAt is cancelled and not counted.
func work(handles []handle, stopAt time.Time) workResult {
	ctx, cancel := context.WithDeadline(context.Background(), stopAt)
	defer cancel()
	var (
		mu  sync.Mutex
		res = workResult{Counts: make([]int64, len(handles))}
		wg  sync.WaitGroup
	)
	for i, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var waits []time.Duration
			var holds, acqs []interval
			var tokens []uint64
			tk, _ := h.(tokener)
			var total, errs int64
			var firstErr error
			for {
				t0 := time.Now()
				if !t0.Before(stopAt) {
					break
				}
				if err := h.Lock(ctx); err != nil {
					if ctx.Err() != nil {
						// Cut off by the end of the window: count the wait
						// so far, so a starved worker still shows in the
						// percentiles.
						waits = append(waits, stopAt.Sub(t0))
						break
					}
					errs++
					firstErr = cmpErr(firstErr, fmt.Errorf("lock: %w", err))
					runtime.Gosched()
					continue
				}
				t1 := time.Now()
				total++
				if t1.Before(stopAt) {
					res.Counts[i]++ // only this goroutine writes index i
					waits = append(waits, t1.Sub(t0))
					acqs = append(acqs, interval{t0.UnixNano(), t1.UnixNano()})
					if tk != nil {
						tokens = append(tokens, tk.token())
					}
				}
				rel := time.Now()
				holds = append(holds, interval{t1.UnixNano(), rel.UnixNano()})
				uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := h.Unlock(uctx); err != nil {
					errs++
					firstErr = cmpErr(firstErr, fmt.Errorf("unlock: %w", err))
				}
				ucancel()
			}
			mu.Lock()
			res.Waits = append(res.Waits, waits...)
			res.Holds = append(res.Holds, holds...)
			res.Acqs = append(res.Acqs, acqs...)
			if len(tokens) == len(acqs) {
				res.Tokens = append(res.Tokens, tokens...)
			}
			res.Total += total
			res.Errs += errs
			if firstErr != nil && res.FirstErr == "" {
				res.FirstErr = firstErr.Error()
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Holds = mergeHolds(res.Holds)
	if n := len(res.Waits); n > maxWaits {
		slices.Sort(res.Waits)
		s := make([]time.Duration, 0, maxWaits)
		for i := range maxWaits {
			s = append(s, res.Waits[i*n/maxWaits])
		}
		res.Waits = s
	}
	return res
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func mergeHolds(iv []interval) []interval {
	if len(iv) == 0 {
		return iv
	}
	slices.SortFunc(iv, func(a, b interval) int { return int(a[0] - b[0]) })
	out := iv[:1]
	for _, x := range iv[1:] {
		last := &out[len(out)-1]
		if x[0]-last[1] < mergeGap {
			last[1] = max(last[1], x[1])
			continue
		}
		out = append(out, x)
	}
	return out
}
