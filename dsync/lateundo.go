package dsync

import (
	"container/heap"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// lateUndoGaps are the waits between the runs of a lost owner-alone
// attempt's undo after the first, then lateUndoEvery until the deadline: a
// copy of the attempt that the first undo overtook (rueidis may send the
// undo on another connection) is most often milliseconds behind it, and
// holds the lock until the next run.
var lateUndoGaps = [...]time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond}

const lateUndoEvery = 250 * time.Millisecond

// lateUndo makes sure, after each of lateUndoGaps, then every
// lateUndoEvery, and last when the server clock has passed the owner's
// deadline dl (server seconds), by the Client's estimate, which is never
// ahead of the server (serverClock), that no copy of the lost owner-alone
// attempt of a fresh owner holds the lock: after the deadline no copy can
// apply any more (at most about 10 runs). A copy that arrives after the
// first undo (mutexWait.failed: it marks the attempt undone, then releases
// and unregisters the wait) can only take a free lock, where the attempt
// reads no mark (see srvclock.go); where the lock is held it reads the mark
// and does nothing. So a run looks before it writes: a GET of the lock,
// read-only, pipelined with the other runs due at once (one round trip per
// tick, not a script per attempt), and the undo (mutex_undo_fresh.lua) only
// where the owner holds it, or where the GET got no answer. The runs of
// all the Client's lost attempts wait in one queue, on one goroutine of
// the Client's (lateUndos), which Close ends after one more run of each: a
// copy that comes after that holds the lock until its lease ends.
func (m *Mutex) lateUndo(owner, mark string, dl int64) {
	m.c.late.add(&lateRun{m: m, owner: owner, mark: mark, dl: dl})
}

// lateRun is the undo runs to come of one lost attempt.
type lateRun struct {
	m           *Mutex
	owner, mark string
	dl          int64 // the owner's deadline, server seconds
	step        int   // the runs of lateUndoGaps done
	next        int64 // when the next run is due (tick)
}

// checkLate runs one check of each of batch (lateUndo) in the background:
// one DoMulti of a GET per run, then the undo where the run's owner holds
// the lock or the GET got no answer. Test events: "lateundo.batch" for
// the batch, "lateundo" for each run once it has run ("lateundo.send" is
// counted by lateUndos.run, as each run is taken from the queue).
func checkLate(c *Client, batch []*lateRun) {
	c.testEvent("lateundo.batch")
	c.background(func(ctx context.Context) {
		cmds := make(rueidis.Commands, len(batch))
		for i, r := range batch {
			cmds[i] = c.rc.B().Get().Key(r.m.key).Build()
		}
		for i, res := range c.rc.DoMulti(ctx, cmds...) {
			r := batch[i]
			v, err := res.ToString()
			switch {
			case err == nil && strings.HasPrefix(v, r.owner+" "):
				r.m.undoFresh(ctx, r.owner, r.mark)
			case err != nil && !rueidis.IsRedisNil(err):
				// No answer: undo as the first undo does, on a goroutine
				// and with a budget of its own (retried: idempotent).
				c.background(func(ctx context.Context) {
					r.m.undoFresh(ctx, r.owner, r.mark)
					c.testEvent("lateundo")
				})
				continue
			}
			c.testEvent("lateundo")
		}
	})
}

// again reports whether r runs again after the run it just had at now
// (tick), and sets when.
func (r *lateRun) again(now int64) bool {
	srv := r.m.c.srv.now()
	if srv > r.dl*1e6 {
		return false // that run came after the deadline: the last needed
	}
	d := lateUndoEvery
	if r.step < len(lateUndoGaps) {
		d = lateUndoGaps[r.step]
		r.step++
	} else if srv > 0 {
		// The run after the deadline comes just after it.
		d = min(d, time.Duration(r.dl*1e6-srv+1000)*time.Microsecond)
	}
	r.next = now + int64(d)
	return true
}

// lateUndos is a Client's queue of lateRuns, by when they are due: one
// goroutine runs them all (started when a run is queued and none is
// running, ended when the queue is empty or the Client closes), not one per
// lost attempt. mu guards q and running.
type lateUndos struct {
	mu      sync.Mutex
	q       lateHeap
	running bool
	wake    chan struct{} // a run was queued ahead of the others
}

type lateHeap []*lateRun

func (q lateHeap) Len() int           { return len(q) }
func (q lateHeap) Less(i, j int) bool { return q[i].next < q[j].next }
func (q lateHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *lateHeap) Push(x any)        { *q = append(*q, x.(*lateRun)) }
func (q *lateHeap) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return r
}

// add queues r's first run: lateUndoGaps[0] from now, or at once if the
// deadline has passed already (a copy may have come after the first undo,
// before the deadline: one run after it is still needed).
func (l *lateUndos) add(r *lateRun) {
	c := r.m.c
	if now := tick(time.Now()); !r.again(now) {
		r.next = now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	heap.Push(&l.q, r)
	if l.running {
		if l.q[0] == r {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		return
	}
	if l.wake == nil {
		l.wake = make(chan struct{}, 1)
	}
	if l.running = c.spawn(&c.loops, func() { l.run(c) }); !l.running {
		// Closing: the first undo has been sent; no more runs.
		l.q = nil
	}
}

// run runs the queued runs as they come due, until none is left, or the
// Client closes: then each queued attempt is checked once more (checkLate).
func (l *lateUndos) run(c *Client) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []*lateRun
	for {
		now := tick(time.Now())
		l.mu.Lock()
		for len(l.q) > 0 && l.q[0].next <= now {
			due = append(due, heap.Pop(&l.q).(*lateRun))
			// Counted under mu: a test that sees the queue empty and
			// not running sees every run's send counted.
			c.testEvent("lateundo.send")
		}
		for _, r := range due {
			if r.again(now) {
				heap.Push(&l.q, r)
			}
		}
		if len(l.q) == 0 {
			l.running = false
		} else {
			t.Reset(time.Duration(l.q[0].next - now))
		}
		running := l.running
		l.mu.Unlock()
		if len(due) > 0 {
			checkLate(c, slices.Clone(due))
			clear(due)
			due = due[:0]
		}
		if !running {
			return
		}
		select {
		case <-c.done:
			l.mu.Lock()
			q := l.q
			l.q, l.running = nil, false
			for range q {
				c.testEvent("lateundo.send")
			}
			l.mu.Unlock()
			if len(q) > 0 {
				checkLate(c, q)
			}
			return
		case <-t.C:
		case <-l.wake:
		}
	}
}
