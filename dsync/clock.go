package dsync

import (
	"container/heap"
	"sync"
	"time"
)

// leaseClock ends the holds whose lease clock ran out unrenewed, with one
// timer for all the holds of a Client (armed for the earliest end) instead
// of a timer per hold: a hold costs a heap slot, not a timer.
//
// Renewals only move a hold's deadline (under hold.mu); the heap keeps the
// deadline a hold had when it was pushed, and a hold found at the top whose
// deadline has moved on is pushed again with the new one. So a hold whose
// lease is renewed every lease/3 is looked at about once per lease.
//
// mu guards q, timer, at and stop, and the heap entry of every hold
// (hold.slot, hold.due), which clockHeap's methods change under it; c is
// set by NewClient. Lock order: Client.mu → leaseClock.mu → hold.mu (see
// locking.go).
type leaseClock struct {
	c     *Client
	mu    sync.Mutex
	q     clockHeap
	timer *time.Timer
	at    int64 // when timer fires (see tick); 0 when not armed
	stop  bool
}

// epoch is the origin of the clock's ticks: monotonic nanoseconds since it,
// so that a heap entry costs 8 bytes rather than a time.Time.
var epoch = time.Now()

// tick is t in the clock's nanoseconds, at least 1.
func tick(t time.Time) int64 { return max(int64(t.Sub(epoch)), 1) }

// clockHeap is a min-heap of holds by hold.due.
type clockHeap []*hold

func (q clockHeap) Len() int           { return len(q) }
func (q clockHeap) Less(i, j int) bool { return q[i].due < q[j].due }
func (q clockHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].slot, q[j].slot = int32(i), int32(j)
}
func (q *clockHeap) Push(x any) {
	h := x.(*hold)
	h.slot = int32(len(*q))
	*q = append(*q, h)
}
func (q *clockHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	h.slot = -1
	return h
}

// add starts watching h, whose deadline is due. It reports false once the
// clock is stopped (the Client is closing).
func (k *leaseClock) add(h *hold, due time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stop {
		return false
	}
	h.due = tick(due)
	heap.Push(&k.q, h)
	k.armLocked()
	return true
}

// remove stops watching h, if it is watched.
func (k *leaseClock) remove(h *hold) {
	k.mu.Lock()
	if i := int(h.slot); i >= 0 && i < len(k.q) && k.q[i] == h {
		heap.Remove(&k.q, i)
		if len(k.q) == 0 && cap(k.q) > 64 {
			k.q = nil // give the backing array back after a burst
		}
	}
	k.mu.Unlock()
}

// each calls f for every hold the clock watches: every hold of the Client
// that is tracked and not ended (a hold whose clock ran out leaves it just
// before it ends as lost). f runs with the clock's lock held: it must not
// call the clock, and may take a hold's mu (leaseClock.mu -> hold.mu).
func (k *leaseClock) each(f func(h *hold)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range k.q {
		f(h)
	}
}

// armLocked sets the timer for the earliest deadline, unless it is set for that
// or sooner. k.mu must be held.
func (k *leaseClock) armLocked() {
	if len(k.q) == 0 || k.stop {
		return
	}
	due := k.q[0].due
	if k.at != 0 && due >= k.at {
		return
	}
	d := time.Duration(due - tick(time.Now()))
	// Client.timers counts the runs of fire to come: one per arming,
	// unless Stop took back a run that was still to come.
	if k.timer == nil {
		k.c.timers.Add(1)
		k.timer = time.AfterFunc(d, k.fire)
	} else {
		if !k.timer.Stop() {
			k.c.timers.Add(1)
		}
		k.timer.Reset(d)
	}
	k.at = due
}

// fire ends every hold whose lease clock ran out, and pushes back those
// whose deadline a renewal moved on.
func (k *leaseClock) fire() {
	defer k.c.timers.Done()
	now := time.Now()
	tnow := tick(now)
	var expired []*hold
	k.mu.Lock()
	k.at = 0
	for len(k.q) > 0 && k.q[0].due <= tnow {
		h := k.q[0]
		h.mu.Lock()
		switch {
		case h.ended:
			heap.Pop(&k.q)
		case h.deadline.After(now):
			h.due = tick(h.deadline) // renewed meanwhile: look again then
			heap.Fix(&k.q, 0)
		default:
			heap.Pop(&k.q)
			h.expiring = true // a renewal reply that comes now is too late
			expired = append(expired, h)
		}
		h.mu.Unlock()
	}
	k.armLocked()
	k.mu.Unlock()
	for _, h := range expired {
		h.mu.Lock()
		deadline := h.deadline
		h.mu.Unlock()
		h.end(h.expiredCause(deadline, now), true)
	}
}

// close stops the clock: no hold is watched or ended by it after this.
// Client.Close waits (timers) for a run already on its way.
func (k *leaseClock) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stop = true
	if k.timer != nil && k.timer.Stop() {
		k.c.timers.Done()
	}
	k.at = 0
	for _, h := range k.q {
		h.slot = -1
	}
	k.q = nil
}
