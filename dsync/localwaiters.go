package dsync

import (
	"context"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// localWaiters makes the goroutines of this Client that wait for a Mutex
// inside the Client (its local queue: behind a holder or an acquisition of
// their own Client) visible to Inspect, in the lock's waiting hash beside
// the entries of the waiting Clients' attempts (mutex_acquire.lua), as the
// entry "<client> local": "<goroutines> <expiry ms>". Inspect reports a
// Client's entries as one waiter with the largest count, so a Client whose
// leader waits in Redis (its entry counts the goroutines queued behind it)
// and whose goroutines are queued is not counted twice.
//
// Nothing is written on the uncontended path, nor for a goroutine that
// waits in Redis with none queued behind it (its attempts' entry counts
// it): only when a goroutine joins or leaves a local queue (add),
// coalesced, countDelay after the first change, by a cleanup (run) that
// then rewrites the entries still counting goroutines every lease/3 and
// ends when none are left; an entry is removed only if one was written.
// An entry lives one lease from its last write, so a Client that died
// leaves none for longer; Close ends every wait, so the last write removes
// them (run keeps going while Close drains the cleanups).
type localWaiters struct {
	c       *Client
	mu      sync.Mutex
	n       map[string]waitCount // by lock key
	dirty   map[string]bool      // changed since written
	running bool
	kick    chan struct{} // a change while run waits
	fn      func(context.Context)
}

// countDelay is how long a change to a local queue waits for others
// before it is written.
const countDelay = 10 * time.Millisecond

// waitCount is what localWaiters knows of one Mutex: its goroutines
// queued in the Client, and those that wait in Redis without having
// queued (a leader, which the queued ones may be behind); written: an
// entry counting goroutines was sent for it, and no removal since.
type waitCount struct {
	queued, leaders int
	written         bool
}

// add counts d more goroutines waiting in the local queue of the Mutex
// with key (d -1: one left it); with leader, waiting in Redis instead.
func (lw *localWaiters) add(key string, d int, leader bool) {
	lw.mu.Lock()
	if lw.n == nil {
		lw.n, lw.dirty = map[string]waitCount{}, map[string]bool{}
		lw.fn = lw.run
		lw.kick = make(chan struct{}, 1)
	}
	n := lw.n[key]
	if leader {
		n.leaders += d
	} else {
		n.queued += d
	}
	lw.n[key] = n
	lw.dirty[key] = true
	start := !lw.running
	lw.running = true
	lw.mu.Unlock()
	select {
	case lw.kick <- struct{}{}:
	default:
	}
	if start && !lw.c.background(lw.fn) {
		lw.mu.Lock()
		lw.running = false
		lw.mu.Unlock()
	}
}

// run writes the counts that changed, countDelay after a change, and all
// of them every lease/3, until no goroutine waits.
func (lw *localWaiters) run(context.Context) {
	c := lw.c
	refreshAt := time.Now().Add(c.cfg.lease / 3)
	for {
		time.Sleep(countDelay) // let the changes of the moment join
		refresh := !time.Now().Before(refreshAt)
		if refresh {
			refreshAt = time.Now().Add(c.cfg.lease / 3)
		}
		lw.mu.Lock()
		var execs []rueidis.LuaExec
		for key, n := range lw.n {
			if !lw.dirty[key] && !refresh {
				continue
			}
			// Written while goroutines are queued: with the one they
			// queue behind, if it waits in Redis (whose own entry, written
			// at its attempts, may not count them yet).
			w := 0
			if q := n.queued; q > 0 {
				w = q + n.leaders
			}
			// A removal only where an entry may be: a wait that led in
			// Redis with no goroutine queued behind it (the common one)
			// writes nothing here, so its Client makes no call beside
			// its own attempts.
			if w > 0 || n.written {
				execs = append(execs, scripts.MutexLocalWaitersCall(key, c.ident, w, c.args.lease).LuaExec)
				n.written = w > 0
				lw.n[key] = n
			}
			if n.queued == 0 && n.leaders == 0 {
				delete(lw.n, key)
			}
		}
		clear(lw.dirty)
		lw.mu.Unlock()
		if len(execs) > 0 {
			// A budget per write, not the loop's: it runs as long as
			// goroutines wait.
			cctx, cancel := context.WithTimeout(c.cleanCtx, cleanupTimeout)
			c.evalMulti(cctx, scripts.MutexLocalWaiters, execs)
			cancel()
		}
		lw.mu.Lock()
		if len(lw.n) == 0 && len(lw.dirty) == 0 {
			lw.running = false
			lw.mu.Unlock()
			return
		}
		dirty := len(lw.dirty) > 0
		lw.mu.Unlock()
		if dirty {
			continue
		}
		t := time.NewTimer(time.Until(refreshAt))
		select {
		case <-t.C:
		case <-lw.kick:
		case <-c.done:
			// Closing: every wait ends; their changes come within
			// countDelay each.
		}
		t.Stop()
	}
}
