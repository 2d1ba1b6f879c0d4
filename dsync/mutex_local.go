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
//	passing    the holder releases (passOnLocked) with waiters queued: to the
//	           first one with the next token of the reserved block (no
//	           round trip), or through one handoff script that reserves a
//	           new block, or (yield) back to Redis when another Client's
//	           waiter marked the lock, the queue head then leading after
//	           yieldWait
//	releasing  busy while the release script runs; then free, and the
//	           next waiter leads
//
// A hold that is lost (lease clock, renewal) makes the state free and
// wakes the next waiter to go to Redis.

// mutexState is what one Client knows of one mutex: its hold, if this
// Client holds it, and the local goroutines waiting for it. Only one
// goroutine at a time talks to Redis for it (busy); the others wait here.
//
// Guards: refs by Client.mu (getMutex, putMutex); every other field by mu,
// and its methods named ...Locked run under mu. A state whose refs drop to
// 0 is cleared and reused under Client.mu alone: nobody refers to it then.
type mutexState struct {
	refs   int // calls in progress plus one for a hold; guarded by Client.mu
	mu     sync.Mutex
	h      *hold
	queue  []*mutexWaiter
	passes int  // consecutive handoffs inside this Client
	busy   bool // a goroutine is acquiring, releasing or handing off in Redis
	// yielded, when not 0, is the last token issued under the hold just
	// yielded to other Clients' waiters: the next leader holds back
	// (holdBack).
	yielded uint64
	// next..last are the fencing tokens reserved in Redis for handoffs
	// inside this Client (see Mutex.block); empty when next > last.
	next, last uint64
	// first is the block's first token, minted at most at the server
	// clock (µs), and at is when its reply arrived: a token of the block is
	// issued only once the clock has reached it, first + µs since at (see
	// tokenDueLocked), so no token is ever ahead of the server clock.
	first uint64
	at    time.Time

	// tag is the value "<owner> <token> 1" of the last hold this Client
	// acquired in Redis, when known without formatting it (a fresh owner's
	// acquisition: ownerTag): its release sends it (tagForLocked).
	tag string
}

// tagForLocked returns st.tag if it is the value of h's hold in Redis
// (h.rOwner, h.rToken, count 1), else "". st.mu must be held.
func (st *mutexState) tagForLocked(h *hold) string {
	t, o := st.tag, h.rOwner
	if len(t) < len(o)+4 || t[:len(o)] != o || t[len(o)] != ' ' || t[len(t)-2:] != " 1" {
		return ""
	}
	var b [20]byte
	if t[len(o)+1:len(t)-2] != string(strconv.AppendUint(b[:0], h.rToken, 10)) {
		return ""
	}
	return t
}

// reservedLocked records the block of tokens a Redis acquisition or
// handoff reserved for hold h. st.mu must be held.
func (st *mutexState) reservedLocked(h *hold) {
	st.next, st.last = h.token+1, h.rToken
	st.first, st.at = h.token, time.Now()
}

// tokenDueLocked reports whether the next token of the block may be issued
// now: not ahead of the server clock, as measured on our clock from the
// reply that reserved the block (a server clock that runs slower than ours lets
// a token get ahead of it by that drift over the block's age). Issuing
// handoffs faster than one per µs sends the handoff to Redis, which mints
// a token from its clock. st.mu must be held.
func (st *mutexState) tokenDueLocked() bool {
	return st.next <= st.last && st.next <= st.first+uint64(time.Since(st.at)/time.Microsecond)
}

// A mutexWaiter is one goroutine queued in a mutexState. ctx, owner and ch
// are set before it is queued, read-only after.
type mutexWaiter struct {
	ctx   context.Context
	owner string
	// ch receives nil ("acquire through Redis now") or the hold handed over.
	ch    chan *hold
	woken bool // a value was sent on ch; guarded by mutexState.mu
	// lctx, set under mutexState.mu before the hold is sent on ch (the
	// waiter reads it after receiving), is the waiter's acquisition when it
	// re-enters a hold its owner took meanwhile (see shareHoldLocked).
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

// getMutex returns the state of the lock key names, counting one reference
// to it (refs), which keeps it in the registry; putMutex hands one back.
// A call holds one reference while it runs, and a hold one for as long as
// it is st.h. Where each is handed back:
//
//   - Mutex.acquire: the call's reference on every return without a new
//     hold (a re-entry, a TryLock that does not lead, a wait given up,
//     stepDown after Redis refused or an error); with a new hold, taken in
//     Redis or handed over by passOnLocked, the call's reference becomes
//     the hold's; a hold handed over as the waiter gave up is passed on
//     with it (passOnLocked), or was lost meanwhile (Mutex.lost).
//   - Mutex.unlock: the call's reference (deferred); the hold's in
//     passOnLocked (deferred there), on every path, handed on or not.
//   - Mutex.lost: the call's, and the hold's if the lost hold was still
//     st.h.
//   - qlock.acquire: the call's on every return without a new hold; with
//     one, the call's becomes the hold's, and a stale st.h's (lost in Redis,
//     its lease clock not run out yet) is handed back for it.
//   - qlock.unlock: the call's (deferred) and, at the last release, the
//     hold's. qlock.ended (lost): the call's, and the hold's if still st.h.
//
// A hold ended by Close (lost false) keeps its reference: the state stays
// in the registry of a closed Client.
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

// putMutex hands back a reference getMutex counted (see there); the last
// one takes st out of the registry, and st is cleared for reuse.
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

// wakeNextLocked lets the first local waiter acquire through Redis, if nobody
// holds or is acquiring. st.mu must be held.
func (st *mutexState) wakeNextLocked() {
	if st.h != nil || st.busy || len(st.queue) == 0 {
		return
	}
	w := st.queue[0]
	st.queue = st.queue[1:]
	w.woken = true
	st.busy = true
	w.ch <- nil
}

// shareHoldLocked lets the queued waiters of h's owner re-enter h, as they would
// had they arrived just after it was taken: leaving them queued until the
// owner releases would deadlock a holder that waits for them. Their lock
// contexts are made here, under st.mu (which must be held), so a release
// cannot end h first.
func (st *mutexState) shareHoldLocked(h *hold) {
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

// removeLocked takes w, which gave up, out of the queue. st.mu must be
// held.
func (st *mutexState) removeLocked(w *mutexWaiter) {
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
// fo its bytes, with room for the hold's value prefix (ownerTag), and the
// hold it makes in Redis (nil for an owner the caller supplied). It notes
// in ob when it waits in the Client's queue (queued) and when a release
// granted it the lock (granted).
func (m *Mutex) acquire(ctx context.Context, owner, mark string, fo *freshMutexOwner, try bool, ob *observation) (lctx context.Context, h *hold, reentered bool, attempts int, err error) {
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
		ob.queued = true
		c.blockedBy(ctx, m.key)
		// For Inspect: a waiter of this Client, in the queue until it
		// returns (or leads in Redis, where its attempts count it too).
		c.waits.add(m.key, 1, false)
		defer c.waits.add(m.key, -1, false)
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
			st.yielded = 0
			st.mu.Unlock()
			if yielded != 0 {
				// Let the other processes' waiter take it first.
				c.testEvent("holdback")
				if err := m.holdBack(ctx, yielded); err != nil {
					m.stepDown(st)
					return nil, nil, false, attempts, err
				}
			}
			h, again, n, err := m.acquireRedis(ctx, st, owner, mark, fo, try, w != nil, &ob.granted)
			attempts += n
			if h == nil {
				m.stepDown(st)
				return nil, nil, false, attempts, err
			}
			var tag string
			if fo != nil && !again {
				tag = h.renewValue() // ownerTag's, set before track: no renewal writes it
			}
			st.mu.Lock()
			st.busy = false
			st.h = h
			st.tag = tag
			st.passes = 0
			st.reservedLocked(h)
			lctx := h.newCtx(ctx)
			st.shareHoldLocked(h)
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
			st.removeLocked(w)
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
				_ = m.passOnLocked(cctx, st, h)
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
	st.wakeNextLocked()
	st.mu.Unlock()
	m.c.putMutex(m.sk(), st)
}

// yieldWait is how long at most a Client's next local waiter holds back
// after the Client yielded a lock to other processes (only when another
// Client's waiter had marked it: see mutex_handoff.lua), so that their
// waiter, woken by the release message, gets it first; it looks every
// yieldPoll whether they have.
const (
	yieldWait = 2 * time.Millisecond
	yieldPoll = 100 * time.Microsecond
)

// holdBack waits, after this Client yielded m with tok the last token
// issued under the hold, until another Client has taken it (the value is no
// longer the yield's free marker "- <tok> 0": see mutex_handoff.lua), or
// yieldWait has passed: then the caller, the Client's next leader, tries
// for it. Taken, its attempt fails and marks the lock, so the other Client
// yields it back at its next check, after one block of local handoffs,
// rather than keep it for as long as this Client held back. A GET every
// yieldPoll: a few commands per yield, none if nobody waits.
func (m *Mutex) holdBack(ctx context.Context, tok uint64) error {
	c := m.c
	marker := "- " + strconv.FormatUint(tok, 10) + " 0"
	wait := yieldWait
	if c.cfg.test.yieldWait > 0 {
		wait = c.cfg.test.yieldWait
	}
	deadline := time.Now().Add(wait)
	for {
		d := min(yieldPoll, time.Until(deadline))
		if d <= 0 {
			return nil
		}
		if err := c.sleepCtx(ctx, d); err != nil {
			return err
		}
		v, err := c.rc.Do(ctx, c.rc.B().Get().Key(m.key).Build()).ToString()
		if err == nil && v == marker {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			c.testEvent("taken")
		}
		// Taken, or gone (FLUSHALL), or Redis failed: the attempt tells.
		return nil
	}
}

// testEvent tells the Client's test hook, if any, of event (see
// testHooks.mutexEvent).
func (c *Client) testEvent(event string) {
	if f := c.cfg.test.mutexEvent; f != nil {
		f(event)
	}
}
