package dsync

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// The Mutex's in-process side: the goroutines of one Client that want the
// same Mutex queue here, and the lock passes among them without Redis.
//
// The states of one Mutex in one Client (a mutexState), as st.h, st.busy
// and st.queue say:
//
//	free       h == nil, !busy: the next caller leads (busy) and goes to Redis
//	acquiring  h == nil, busy: a leader is in Redis (acquireRedis); later
//	           callers queue
//	held       h != nil: callers queue (the owner's own re-enter h)
//	passing    the holder releases (passOn) with waiters queued: to the
//	           first one with the next token of the reserved block (no
//	           round trip), or through one handoff script that reserves a
//	           new block, or (yield) back to Redis when other processes
//	           wait, the queue head then leading after yieldWait
//	releasing  busy while the release script runs; then free, and the
//	           next waiter leads
//
// A hold that is lost (lease clock, renewal) makes the state free and
// wakes the next waiter to go to Redis.

// mutexState is what one Client knows of one mutex: its hold, if this
// Client holds it, and the local goroutines waiting for it. Only one
// goroutine at a time talks to Redis for it (busy); the others wait here.
type mutexState struct {
	refs    int // guarded by Client.mu: calls in progress plus one for a hold
	mu      sync.Mutex
	h       *hold
	queue   []*mutexWaiter
	passes  int  // consecutive handoffs inside this Client
	busy    bool // a goroutine is acquiring, releasing or handing off in Redis
	yielded bool // the lock was just released to other processes' waiters
	// next..last are the fencing tokens reserved in Redis for handoffs
	// inside this Client (see Mutex.block); empty when next > last.
	next, last uint64
	// first is the block's first token, minted at most at the server
	// clock (µs), and at is when its reply arrived: a token of the block is
	// issued only once the clock has reached it, first + µs since at (see
	// tokenDue), so no token is ever ahead of the server clock.
	first uint64
	at    time.Time

	// tag is the value prefix "<owner> <token> " of the last hold this
	// Client acquired in Redis, when known without formatting it (a fresh
	// owner's acquisition: ownerTag): its release sends it (tagFor).
	tag string
}

// tagFor returns st.tag if it is the value prefix of h's hold in Redis
// (h.rOwner, h.rToken), else "". st.mu must be held.
func (st *mutexState) tagFor(h *hold) string {
	t, o := st.tag, h.rOwner
	if len(t) < len(o)+3 || t[:len(o)] != o || t[len(o)] != ' ' {
		return ""
	}
	var b [20]byte
	if t[len(o)+1:len(t)-1] != string(strconv.AppendUint(b[:0], h.rToken, 10)) {
		return ""
	}
	return t
}

// reserved records the block of tokens a Redis acquisition or handoff
// reserved for hold h.
func (st *mutexState) reserved(h *hold) {
	st.next, st.last = h.token+1, h.rToken
	st.first, st.at = h.token, time.Now()
}

// tokenDue reports whether the next token of the block may be issued now:
// not ahead of the server clock, as measured on our clock from the reply
// that reserved the block (a server clock that runs slower than ours lets
// a token get ahead of it by that drift over the block's age). Issuing
// handoffs faster than one per µs sends the handoff to Redis, which mints
// a token from its clock.
func (st *mutexState) tokenDue() bool {
	return st.next <= st.last && st.next <= st.first+uint64(time.Since(st.at)/time.Microsecond)
}

type mutexWaiter struct {
	ctx   context.Context
	owner string
	// ch receives nil ("acquire through Redis now") or the hold handed over.
	ch    chan *hold
	woken bool // a value was sent on ch; guarded by mutexState.mu
	// lctx, set before the hold is sent on ch, is the waiter's acquisition
	// when it re-enters a hold its owner took meanwhile (see shareHold).
	lctx context.Context
}

// stateKey names one lock's per-process state in the Client's registry
// (Client.mutexes): the lock's key and, for an RWMutex, its hold slot: one
// for the write hold ("w"), one per reader owner ("r" and the owner).
type stateKey struct {
	key, slot, owner string
}

// maxSpareStates bounds the Client's spare lock states.
const maxSpareStates = 32

// stateOf returns the state of key in the registry, or nil. c.mu must be
// held.
func (c *Client) stateOf(key stateKey) *mutexState {
	if key.slot == "" && key.owner == "" {
		return c.mutexes[key.key]
	}
	return c.mutexesBy[key]
}

// setState enters st as the state of key in the registry, or removes
// key's (st nil). c.mu must be held.
func (c *Client) setState(key stateKey, st *mutexState) {
	if key.slot == "" && key.owner == "" {
		if st == nil {
			delete(c.mutexes, key.key)
		} else {
			c.mutexes[key.key] = st
		}
		c.mutexes = compact(c.mutexes, &c.mutexesPeak)
		return
	}
	if st == nil {
		delete(c.mutexesBy, key)
	} else {
		c.mutexesBy[key] = st
	}
	c.mutexesBy = compact(c.mutexesBy, &c.mutexesByPeak)
}

func (c *Client) getMutex(key stateKey) *mutexState {
	c.mu.Lock()
	st := c.stateOf(key)
	if st == nil {
		if n := len(c.spareStates); n > 0 {
			st = c.spareStates[n-1]
			c.spareStates[n-1] = nil
			c.spareStates = c.spareStates[:n-1]
		} else {
			st = &mutexState{}
		}
		c.setState(key, st)
	}
	st.refs++
	c.mu.Unlock()
	return st
}

func (c *Client) putMutex(key stateKey, st *mutexState) {
	c.mu.Lock()
	if st.refs--; st.refs == 0 {
		c.setState(key, nil)
		// Nobody refers to st now (a state is used only while counted in
		// refs), so it can serve the next lock, cleared; its queue's
		// array is kept if small.
		if len(c.spareStates) < maxSpareStates {
			q := st.queue[:0]
			if cap(q) > 8 {
				q = nil
			}
			*st = mutexState{queue: q}
			c.spareStates = append(c.spareStates, st)
		}
	}
	c.mu.Unlock()
}

// wakeNext lets the first local waiter acquire through Redis, if nobody
// holds or is acquiring. st.mu must be held.
func (st *mutexState) wakeNext() {
	if st.h != nil || st.busy || len(st.queue) == 0 {
		return
	}
	w := st.queue[0]
	st.queue = st.queue[1:]
	w.woken = true
	st.busy = true
	w.ch <- nil
}

// shareHold lets the queued waiters of h's owner re-enter h, as they would
// had they arrived just after it was taken: leaving them queued until the
// owner releases would deadlock a holder that waits for them. Their lock
// contexts are made here, under st.mu, so a release cannot end h first.
func (st *mutexState) shareHold(h *hold) {
	q := st.queue[:0]
	for _, w := range st.queue {
		if w.owner != h.owner {
			q = append(q, w)
			continue
		}
		w.woken = true
		w.lctx = h.newCtx(w.ctx)
		w.ch <- h
	}
	clear(st.queue[len(q):])
	st.queue = q
}

func (st *mutexState) remove(w *mutexWaiter) {
	for i, x := range st.queue {
		if x == w {
			st.queue = append(st.queue[:i], st.queue[i+1:]...)
			return
		}
	}
}

// acquire takes m for owner: by re-entry of this Client's hold, by a
// handoff from a local holder, or in Redis. mark is the undo mark of a
// fresh owner (see Mutex.lock), "" for an owner the caller supplied, and
// buf its bytes, with room for the hold's value prefix (ownerTag).
func (m *Mutex) acquire(ctx context.Context, owner, mark string, buf []byte, try bool) (lctx context.Context, h *hold, reentered bool, attempts int, err error) {
	c := m.c
	st := c.getMutex(m.sk())
	st.mu.Lock()
	if h := st.h; h != nil && h.owner == owner {
		lctx := h.newCtx(ctx)
		st.mu.Unlock()
		c.putMutex(m.sk(), st)
		return lctx, h, true, 0, nil
	}
	lead := st.h == nil && !st.busy
	if try && !lead {
		st.mu.Unlock()
		c.putMutex(m.sk(), st)
		return nil, nil, false, 0, nil
	}
	var w *mutexWaiter
	if lead {
		st.busy = true
	} else {
		w = &mutexWaiter{ctx: ctx, owner: owner, ch: make(chan *hold, 1)}
		st.queue = append(st.queue, w)
		c.blockedBy(ctx, st.h)
	}
	st.mu.Unlock()
	for {
		if lead {
			if c.closed.Load() {
				m.stepDown(st)
				return nil, nil, false, attempts, ErrClosed
			}
			st.mu.Lock()
			yielded := st.yielded
			st.yielded = false
			st.mu.Unlock()
			if yielded {
				// Let the other processes' waiter take it first.
				if err := c.sleepCtx(ctx, yieldWait); err != nil {
					m.stepDown(st)
					return nil, nil, false, attempts, err
				}
			}
			h, again, n, err := m.acquireRedis(ctx, st, owner, mark, buf, try)
			attempts += n
			if h == nil {
				m.stepDown(st)
				return nil, nil, false, attempts, err
			}
			var tag string
			if buf != nil && !again {
				tag = h.renewTag // ownerTag's, set before track: no renewal writes it
			}
			st.mu.Lock()
			st.busy = false
			st.h = h
			st.tag = tag
			st.passes = 0
			st.reserved(h)
			lctx := h.newCtx(ctx)
			st.shareHold(h)
			st.mu.Unlock()
			return lctx, h, again, attempts, nil
		}
		var done error
		select {
		case h := <-w.ch:
			if h == nil {
				lead = true
				continue
			}
			if w.lctx != nil {
				c.putMutex(m.sk(), st) // re-entered: the hold has its reference
				return w.lctx, h, true, attempts, nil
			}
			return h.newCtx(ctx), h, false, attempts, nil
		case <-ctx.Done():
			done = ctx.Err()
		case <-c.done:
			done = ErrClosed
		}
		st.mu.Lock()
		if !w.woken {
			st.remove(w)
			st.mu.Unlock()
			c.putMutex(m.sk(), st)
			return nil, nil, false, attempts, done
		}
		st.mu.Unlock()
		h := <-w.ch
		if w.lctx != nil {
			// Re-entered as we gave up: the acquisition is made, so report
			// it rather than undo it (its context ends with ctx).
			c.putMutex(m.sk(), st)
			return w.lctx, h, true, attempts, nil
		}
		// Woken as we gave up: pass on what we were given.
		if h != nil {
			cctx, cancel := cleanupCtx(ctx)
			st.mu.Lock()
			if st.h == h {
				st.h = nil
				_ = m.passOn(cctx, st, h)
			} else {
				st.mu.Unlock()
			}
			cancel()
		} else {
			m.stepDown(st)
		}
		return nil, nil, false, attempts, done
	}
}

// stepDown ends the caller's turn at Redis without a hold: the next local
// waiter goes to Redis, and st leaves the registry if nobody uses it.
func (m *Mutex) stepDown(st *mutexState) {
	st.mu.Lock()
	st.busy = false
	st.wakeNext()
	st.mu.Unlock()
	m.c.putMutex(m.sk(), st)
}

// yieldWait is how long a Client's next local waiter holds back after the
// Client yielded a lock to other processes, so that their waiter, woken by
// the release message, gets it first.
const yieldWait = 2 * time.Millisecond
