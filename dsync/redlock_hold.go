package dsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// keep records rh and returns its lock context, which a loss of so many
// nodes that no majority remains cancels with ErrLockLost, or ErrClosed
// when every node it lost went with its Client's Close.
func (rl *RedLock) keep(ctx context.Context, owner string, rh *redHold) context.Context {
	lctx, cancel := context.WithCancelCause(withOwnerVal(ctx, ownerVal{owner: owner}))
	rh.cancel = cancel
	var mu sync.Mutex
	alive, closed := 0, true // closed: every member lost so far ended by Close
	for _, mctx := range rh.ctxs {
		if mctx != nil {
			alive++
		}
	}
	alive0 := alive
	for _, mctx := range rh.ctxs {
		if mctx == nil {
			continue
		}
		rh.stops = append(rh.stops, context.AfterFunc(mctx, func() {
			cause := context.Cause(mctx)
			if !errors.Is(cause, ErrLockLost) && !errors.Is(cause, ErrClosed) {
				return
			}
			mu.Lock()
			alive--
			lost := alive < rl.quorum
			closed = closed && errors.Is(cause, ErrClosed)
			var why error = &lostError{kind: KindRedLock, name: rl.name,
				why: fmt.Sprintf("fewer than a majority (%d of %d) of its nodes still hold it; the last one lost: %v", alive, len(rh.ctxs), cause)}
			if closed {
				why = ErrClosed // the majority went with its Clients' Close
			}
			mu.Unlock()
			if lost {
				cancel(why)
			}
		}))
	}
	rl.mu.Lock()
	rl.held.push(owner, rh)
	rl.mu.Unlock()
	return &compositeCtx{Context: lctx, cancel: cancel, lost: func() error {
		// As the watchers count, but now: the members' Err ends those
		// whose lease ran out.
		var lost []error
		for _, mctx := range rh.ctxs {
			if mctx == nil {
				continue
			}
			if cause := memberLoss(mctx); cause != nil {
				lost = append(lost, cause)
			}
		}
		left := alive0 - len(lost)
		if len(lost) == 0 || left >= rl.quorum {
			return nil
		}
		for _, cause := range lost {
			if !errors.Is(cause, ErrClosed) {
				return &lostError{kind: KindRedLock, name: rl.name,
					why: fmt.Sprintf("fewer than a majority (%d of %d) of its nodes still hold it; one lost: %v", left, len(rh.ctxs), cause)}
			}
		}
		return ErrClosed // the majority went with its Clients' Close
	}}
}

// release releases rh on every node, in parallel. A node that failed with
// an error is asked too, since its acquisition may have run with the reply
// lost.
func (rl *RedLock) release(ctx context.Context, owner string, rh *redHold, errs []error) error {
	for _, s := range rh.stops {
		s()
	}
	octx := withOwnerVal(ctx, ownerVal{owner: owner})
	out := make([]error, len(rl.nodes))
	for i := range out {
		out[i] = errNodeTimeout
	}
	var omu sync.Mutex
	var wg sync.WaitGroup
	for i, m := range rl.nodes {
		uctx := rh.ctxs[i]
		if uctx == nil {
			if errs == nil || errs[i] == nil {
				continue
			}
			uctx = octx
		}
		if errs != nil && errors.Is(errs[i], errNodeTimeout) {
			// Stalled: undo in the background, bounded by the Mutex's
			// cleanup timeout; waiting would only delay the failure.
			go func() { _ = m.UnlockContext(uctx) }()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.UnlockContext(uctx)
			omu.Lock()
			out[i] = err
			omu.Unlock()
		}()
	}
	// A stalled node must not hold the release up either: wait at most the
	// node timeout; the stragglers' releases finish on their own (each is
	// bounded by its Mutex's cleanup timeout).
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(rl.timeo)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	omu.Lock()
	out = append([]error(nil), out...)
	omu.Unlock()
	for _, cancel := range rh.cancels {
		if cancel != nil {
			cancel(errReleased)
		}
	}
	if errs != nil {
		return nil // undoing a failed round: nothing to report
	}
	held := 0
	var failed []error
	for i, err := range out {
		if rh.ctxs[i] == nil {
			continue
		}
		if err == nil {
			held++
		} else {
			failed = append(failed, err)
		}
	}
	if held >= rl.quorum {
		return nil
	}
	return errors.Join(append([]error{ErrNotHeld}, failed...)...)
}
