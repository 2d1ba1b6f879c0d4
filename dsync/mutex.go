package dsync

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// freeMarkerTTL is how long a released mutex key is kept as "free, last
// token T", so the next token continues from T rather than from the clock.
const freeMarkerTTL = time.Hour

// A Mutex is a mutual exclusion lock shared by every Client, in any process,
// that uses the same key prefix and name. It is reentrant by owner: an
// acquisition whose context carries the owner of the current hold re-enters
// it (see WithOwner), and each acquisition needs its own release.
//
// Lock, Unlock and TryLock make a Mutex a sync.Locker: each Lock takes a
// fresh owner, so, as with sync.Mutex, a second Lock blocks until Unlock,
// and any goroutine may call Unlock.
//
// Goroutines of one Client that wait for the same Mutex queue locally and
// are handed the lock without a round trip (see WithMaxLocalHandoffs); Redis
// then still names the owner that acquired it there. So a holder that got
// the lock by such a handoff re-enters and releases it through the same
// Client only.
//
// A Mutex is safe for concurrent use. Its zero value is not usable; create
// Mutexes with Client.NewMutex. A Mutex may be copied only before first use.
type Mutex struct {
	c    *Client
	name string
	key  string // the lock value "<owner> <token> <count>"
	ch   string // wakeup channel, published on release
	err  error  // a bad name, returned by every call
	lc   lockConfig

	// Arguments computed once, so an acquisition does not rebuild them.
	keys    []string // {key}
	relKeys []string // {key, ch}
	wkey    string   // waiting count: waiting Client -> "<goroutines> <expiry ms>"
	skey    stateKey // m's state in the Client's registry

	leaseArg string // lease of a new hold, in ms
	markArg  string // free-marker lifetime, in ms
	// block is how many fencing tokens a Redis acquisition or handoff
	// reserves: the first for its holder, the others for handoffs inside
	// this Client that need no round trip. 1 with a fixed lease, since each
	// hold must then start its own lease in Redis.
	block    int
	blockArg string

	lk lockerHolds // the hold taken by Lock or TryLock
}

// NewMutex returns the mutex called name. An invalid name (empty, or longer
// than MaxNameLen) makes every call fail with ErrInvalidArgument.
func (c *Client) NewMutex(name string, opts ...LockOption) *Mutex {
	key := c.lockKey("mutex", name)
	m := &Mutex{c: c, name: name, key: key, ch: key + ":ch", err: checkName(name), lc: newLockConfig(opts)}
	m.keys = []string{m.key}
	m.relKeys = []string{m.key, m.ch}
	m.wkey = key + ":waiting"
	m.skey = stateKey{key: key}
	m.leaseArg = leaseMS(m.lease())
	m.markArg = leaseMS(freeMarkerTTL)
	m.block = 1
	if m.lc.leaseTime == 0 && c.cfg.handoffs > 0 {
		m.block = c.cfg.handoffs
	}
	m.blockArg = strconv.Itoa(m.block)
	return m
}

// Lock acquires m, blocking until it is held. Redis errors do not end the
// wait: Lock logs them, reports them to the observer and retries with
// backoff. Lock panics if the Client is closed or the name is invalid,
// errors that waiting cannot cure. (The adapter in locker.go.)
func (m *Mutex) Lock() { lockerLock(m, &m.lk) }

// TryLock tries to acquire m without waiting and reports whether it did.
// It returns false on any error.
func (m *Mutex) TryLock() bool { return lockerTryLock(m, &m.lk) }

// Unlock releases the hold taken by Lock or TryLock. It is a run-time error
// (a panic) if m was not locked by Lock or TryLock. A release that fails
// (the lock was lost, Redis is unreachable) is logged; the lock then
// expires with its lease.
func (m *Mutex) Unlock() { lockerUnlock(m, &m.lk, "unlock") }

func (m *Mutex) lockFor(ctx context.Context, try bool) (context.Context, bool, error) {
	return m.lock(ctx, try)
}

func (m *Mutex) unlockFor(ctx context.Context) error { return m.UnlockContext(ctx) }

func (m *Mutex) lockerEnv() (string, string, *slog.Logger, *Client) {
	return "Mutex", m.name, m.c.cfg.logger, m.c
}

// LockContext acquires m for the owner ctx carries (a fresh one if none),
// waiting until it is held or ctx is done. It returns the lock context:
// derived from ctx, carrying the owner and the fencing token, and cancelled
// when the hold is released (cause: released) or lost (cause: ErrLockLost).
// Being derived from ctx, it also ends with ctx; that does not release m.
//
// A wait ended by ctx returns an error for which errors.Is(err, ctx.Err())
// holds, and leaves nothing behind in Redis.
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := m.lock(ctx, false)
	return lctx, err
}

// TryLockContext is LockContext without waiting: when another owner holds
// m it returns false and a nil error.
func (m *Mutex) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return m.lock(ctx, true)
}

// UnlockContext releases one acquisition by the owner ctx carries (the lock
// context, or any context with the same owner). It returns ErrNotHeld if
// that owner does not hold m. The release runs even if ctx is already
// cancelled, since a lost lock's context is.
func (m *Mutex) UnlockContext(ctx context.Context) error {
	err := m.unlock(ctx)
	if err != nil && ctx != nil && ctxErr(ctx) == nil {
		err = ownErr(err) // a timeout of the release's own budget, not ctx's
	}
	return err
}

func (m *Mutex) unlock(ctx context.Context) error {
	if ctx == nil {
		return errors.Join(ErrInvalidArgument, errors.New("dsync: nil context"))
	}
	if m.err != nil {
		return m.err
	}
	if err := m.c.checkOpen(); err != nil {
		return err
	}
	owner, ok := OwnerOf(ctx)
	ctx = releaseCtx(ctx)
	if !ok {
		return ErrNotHeld
	}
	c := m.c
	// Redis is told under ctx only if it bounds the release in time; else
	// under the Client's context, whose Done channel exists already (a
	// lock context's would be made for this call alone).
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		rctx = c.ctx
	}
	st := c.getMutex(m.skey)
	defer c.putMutex(m.skey, st)
	st.mu.Lock()
	h := st.h
	if h == nil || h.owner != owner {
		st.mu.Unlock()
		// Not held through this Client: the owner may hold it through
		// another Client, so ask Redis.
		code, err := m.release(rctx, owner, 0, 0)
		if err == nil && code == 0 {
			err = ErrNotHeld
		}
		return wrapErr(KindMutex, m.name, err)
	}
	if h.depth() > 1 {
		h.pop()
		st.mu.Unlock()
		m.observeRelease(ctx, h, nil, false)
		return nil
	}
	// The last acquisition's context is cancelled by h.end once the lock
	// is passed on, so the release below can still run under ctx.
	st.h = nil
	err := m.passOn(rctx, st, h)
	m.observeRelease(ctx, h, err, true)
	return err
}

func (m *Mutex) observeRelease(ctx context.Context, h *hold, err error, complete bool) {
	if f := m.c.cfg.observer.Released; f != nil {
		f(ctx, Released{Lock: h.lock, Hold: h.id, Held: time.Since(h.start), Err: err, Complete: complete})
	}
}

func (m *Mutex) lockInfo() Lock { return Lock{Kind: KindMutex, Name: m.name, N: 1} }

func (m *Mutex) lock(ctx context.Context, try bool) (context.Context, bool, error) {
	c := m.c
	if err := c.checkCall(ctx, m.err); err != nil {
		return nil, false, err
	}
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	ctx, ob := c.observe(ctx, m.lockInfo(), owner, try)
	lctx, h, reentered, attempts, err := m.acquire(ctx, owner, try)
	ob.done(h, reentered, attempts, err)
	return lctx, h != nil, wrapErr(KindMutex, m.name, err)
}

// mutexState is what one Client knows of one mutex: its hold, if this
// Client holds it, and the local goroutines waiting for it. Only one
// goroutine at a time talks to Redis for it (busy); the others wait here.
type mutexState struct {
	refs    int // guarded by Client.mu: calls in progress plus one for a hold
	mu      sync.Mutex
	h       *hold
	queue   []*mutexWaiter
	busy    bool // a goroutine is acquiring, releasing or handing off in Redis
	passes  int  // consecutive handoffs inside this Client
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
}

// reserved records the block of tokens a Redis acquisition or handoff
// reserved for hold h.
func (st *mutexState) reserved(h *hold) {
	st.next, st.last = h.token+1, h.rToken
	st.first, st.at = h.token, time.Now()
}

// tokenDue reports whether the next token of the block may be issued now:
// not ahead of the server clock. Issuing handoffs faster than one per µs
// (or on a server whose clock runs slower than ours) sends the handoff to
// Redis, which mints a token from its clock.
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

func (c *Client) getMutex(key stateKey) *mutexState {
	c.mu.Lock()
	st := c.mutexes[key]
	if st == nil {
		st = &mutexState{}
		c.mutexes[key] = st
		c.mutexes = compact(c.mutexes, &c.mutexesPeak)
	}
	st.refs++
	c.mu.Unlock()
	return st
}

func (c *Client) putMutex(key stateKey, st *mutexState) {
	c.mu.Lock()
	if st.refs--; st.refs == 0 {
		delete(c.mutexes, key)
		c.mutexes = compact(c.mutexes, &c.mutexesPeak)
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

func (m *Mutex) acquire(ctx context.Context, owner string, try bool) (lctx context.Context, h *hold, reentered bool, attempts int, err error) {
	c := m.c
	st := c.getMutex(m.skey)
	st.mu.Lock()
	if h := st.h; h != nil && h.owner == owner {
		lctx := h.newCtx(ctx)
		st.mu.Unlock()
		c.putMutex(m.skey, st)
		return lctx, h, true, 0, nil
	}
	lead := st.h == nil && !st.busy
	if try && !lead {
		st.mu.Unlock()
		c.putMutex(m.skey, st)
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
			st.mu.Lock()
			yielded := st.yielded
			st.yielded = false
			st.mu.Unlock()
			if yielded {
				// Let the other processes' waiter take it first.
				if err := c.sleepCtx(ctx, yieldWait); err != nil {
					st.mu.Lock()
					st.busy = false
					st.wakeNext()
					st.mu.Unlock()
					c.putMutex(m.skey, st)
					return nil, nil, false, attempts, err
				}
			}
			h, again, n, err := m.acquireRedis(ctx, st, owner, try)
			attempts += n
			st.mu.Lock()
			st.busy = false
			if h == nil {
				st.wakeNext()
				st.mu.Unlock()
				c.putMutex(m.skey, st)
				return nil, nil, false, attempts, err
			}
			st.h = h
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
				c.putMutex(m.skey, st) // re-entered: the hold has its reference
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
			c.putMutex(m.skey, st)
			return nil, nil, false, attempts, done
		}
		st.mu.Unlock()
		h := <-w.ch
		if w.lctx != nil {
			// Re-entered as we gave up: the acquisition is made, so report
			// it rather than undo it (its context ends with ctx).
			c.putMutex(m.skey, st)
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
			st.mu.Lock()
			st.busy = false
			st.wakeNext()
			st.mu.Unlock()
			c.putMutex(m.skey, st)
		}
		return nil, nil, false, attempts, done
	}
}

// yieldWait is how long a Client's next local waiter holds back after the
// Client yielded a lock to other processes, so that their waiter, woken by
// the release message, gets it first.
const yieldWait = 2 * time.Millisecond

// passOn ends hold h (removed from st.h, no acquisitions left): it hands the
// lock to the next local waiter, or releases it in Redis and lets the next
// local waiter compete. Called with st.mu held; unlocks it.
//
// Every acquisition in Redis reserves m.block fencing tokens (the value
// records the last), so the next m.block-1 handoffs inside this Client need
// no round trip: the new holder takes the next token and the same hold in
// Redis. When the block runs out, a handoff script reserves the next one in
// one round trip, and first asks Redis whether other processes wait (their
// waiters are subscribed to the lock's channel); if so it releases the lock
// to them instead: the yield. Without waiters elsewhere the lock keeps
// passing locally, up to a hard cap of 8 blocks, in case a waiter could not
// subscribe.
func (m *Mutex) passOn(ctx context.Context, st *mutexState, h *hold) error {
	c := m.c
	defer c.putMutex(m.skey, st) // the hold's reference
	h.beginRelease()
	bound := c.cfg.handoffs
	if len(st.queue) > 0 && bound > 0 && st.passes < 8*bound && st.tokenDue() && !h.isEnded() {
		// A token from the block reserved in Redis: no round trip. The new
		// hold is the same hold in Redis, so it takes over its lease clock.
		w := st.queue[0]
		st.queue = st.queue[1:]
		w.woken = true
		st.passes++
		nh := m.newHold(w.owner, st.next)
		st.next++
		nh.rOwner, nh.rToken = h.rOwner, h.rToken
		// Hand over before reading h's lease clock: a renewal reply in
		// between reaches nh, which keeps it for trackUntil.
		h.handedTo(nh)
		if nh.trackUntil(h.leaseEnd()) {
			h.end(errReleased, false)
			st.h = nh
			w.ch <- nh
			st.shareHold(nh) // other waiters of the same owner re-enter
			st.mu.Unlock()
			return nil
		}
		// Closed meanwhile: the waiter finds out through Redis.
		st.busy = true
		w.ch <- nil
		st.mu.Unlock()
		h.end(errReleased, false)
		return ErrClosed
	}
	// A handoff through Redis reserves a new block; with blocks each is a
	// yield check, without them every bound-th.
	check := bound > 0 && (m.block > 1 || (st.passes > 0 && st.passes%bound == 0))
	if len(st.queue) > 0 && bound > 0 && st.passes < 8*bound && !(check && c.cluster && !c.sharded) && !h.isEnded() {
		// In a cluster without sharded pub/sub, PUBSUB NUMSUB sees only one
		// node's subscribers, so a check there always yields (the plain
		// release below).
		w := st.queue[0]
		st.queue = st.queue[1:]
		w.woken = true
		st.busy = true
		st.passes++
		st.mu.Unlock()
		nh, yielded, err := m.handoff(ctx, h, w.owner, check)
		h.end(errReleased, false)
		st.mu.Lock()
		st.busy = false
		switch {
		case nh != nil:
			st.h = nh
			st.reserved(nh)
			w.ch <- nh
			st.shareHold(nh) // other waiters of the same owner re-enter
		case yielded:
			// Back to the head of the queue, to compete after the others.
			w.woken = false
			st.queue = append([]*mutexWaiter{w}, st.queue...)
			st.passes = 0
			st.yielded = true
			st.wakeNext()
		default:
			// Not handed over: the waiter acquires through Redis.
			st.busy = true
			w.ch <- nil
		}
		st.mu.Unlock()
		return err
	}
	st.busy = true
	st.yielded = len(st.queue) > 0 && st.passes > 0
	st.passes = 0
	st.mu.Unlock()
	code, err := m.release(ctx, h.rOwner, h.rToken, h.token)
	ended := h.end(errReleased, false)
	st.mu.Lock()
	st.busy = false
	st.wakeNext()
	st.mu.Unlock()
	if err == nil && (code == 0 || !ended) {
		err = ErrNotHeld
	}
	return wrapErr(KindMutex, m.name, err)
}

// handoff moves the lock from hold h to owner to in one script and returns
// the new hold; with check, it yields instead if other processes wait. It
// returns nil with the reason if it could do neither.
func (m *Mutex) handoff(ctx context.Context, h *hold, to string, check bool) (nh *hold, yielded bool, err error) {
	c := m.c
	lease := m.lease()
	own := "-1"
	if check {
		own = "0"
		if c.notify.isLive(m.ch) {
			own = "1"
		}
	}
	args := []string{h.rOwner, strconv.FormatUint(h.rToken, 10), to, m.leaseArg, own, m.markArg, m.blockArg, strconv.FormatUint(h.token, 10)}
	var vals []int64
	var sentAt time.Time
	err = idempotent(ctx, func(ctx context.Context) (err error) {
		sentAt = time.Now()
		vals, err = c.lua(scripts.MutexHandoff).Exec(ctx, c.rc, m.relKeys, args).AsIntSlice()
		return err
	})
	if err != nil {
		return nil, false, wrapErr(KindMutex, m.name, err)
	}
	if len(vals) == 1 && vals[0] == 2 {
		return nil, true, nil
	}
	if len(vals) < 2 || vals[0] != 1 {
		// h was not this owner's alone (lost, or re-entered through another
		// Client): release our part normally.
		code, err := m.release(ctx, h.rOwner, h.rToken, h.token)
		if err == nil && code == 0 {
			err = ErrNotHeld
		}
		return nil, false, wrapErr(KindMutex, m.name, err)
	}
	nh = m.newHold(to, uint64(vals[1]))
	nh.rToken = nh.token + uint64(m.block) - 1
	if !nh.track(sentAt, lease) {
		// Closed meanwhile: nobody will renew or release the new hold.
		_, _ = m.release(ctx, to, nh.rToken, nh.token)
		return nil, false, ErrClosed
	}
	return nh, false, nil
}

func (m *Mutex) lease() time.Duration {
	if m.lc.leaseTime > 0 {
		return m.lc.leaseTime
	}
	return m.c.cfg.lease
}

func (m *Mutex) newHold(owner string, token uint64) *hold {
	h := m.c.newHold(m.lockInfo(), owner, token)
	h.key = m.key
	h.watchdog = m.lc.leaseTime == 0
	h.ops = m
	return h
}

// A Mutex is the holdOps of its holds.

func (m *Mutex) renewExec(h *hold) (*rueidis.Lua, rueidis.LuaExec) {
	return scripts.MutexRenew, rueidis.LuaExec{Keys: m.keys, Args: []string{h.mutexPrefix(), leaseMS(m.c.cfg.lease)}}
}

func (m *Mutex) renewKey(h *hold) (key, prefix string, ok bool) {
	return m.key, h.mutexPrefix(), true
}

func (m *Mutex) releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec) {
	return scripts.MutexRelease, rueidis.LuaExec{Keys: m.relKeys, Args: []string{h.rOwner, strconv.FormatUint(h.rToken, 10), m.markArg, strconv.FormatUint(h.token, 10)}}
}

func (m *Mutex) ended(h *hold, lost bool) {
	if lost {
		m.lost(h)
	}
}

// lost forgets a lost hold, so the next local waiter can try.
func (m *Mutex) lost(h *hold) {
	c := m.c
	st := c.getMutex(m.skey)
	st.mu.Lock()
	if st.h == h {
		st.h = nil
		st.wakeNext()
		st.mu.Unlock()
		c.putMutex(m.skey, st) // the hold's reference
	} else {
		st.mu.Unlock()
	}
	c.putMutex(m.skey, st)
}

// release runs the release script (token 0: any hold of owner); used is
// the last fencing token issued under the hold (0: unknown), which the free
// marker records. A release of a known hold is retried after a lost reply,
// which the script makes safe, and completes even if ctx ends (see
// idempotent).
func (m *Mutex) release(ctx context.Context, owner string, token, used uint64) (code int64, err error) {
	args := []string{owner, strconv.FormatUint(token, 10), m.markArg, strconv.FormatUint(used, 10)}
	call := func(ctx context.Context) (err error) {
		code, err = m.c.lua(scripts.MutexRelease).Exec(ctx, m.c.rc, m.relKeys, args).AsInt64()
		return err
	}
	if token == 0 {
		// An owner-only release could decrement twice if repeated: one try.
		if ctx.Err() == nil {
			return code, call(ctx)
		}
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		return code, call(cctx)
	}
	return code, idempotent(ctx, call)
}

// unregister removes this Client's entry from m's waiting count when its
// wait ends without the lock, unless another local waiter goes on waiting
// (it registers at its next attempt, overwriting the entry), and with the
// last entry the value's mark that someone waits.
func (m *Mutex) unregister(st *mutexState) {
	st.mu.Lock()
	others := len(st.queue) > 0
	st.mu.Unlock()
	if others {
		return
	}
	c := m.c
	c.background(func(ctx context.Context) {
		_ = c.lua(scripts.MutexUnwait).Exec(ctx, c.rc, []string{m.key, m.wkey}, []string{c.ident}).Error()
	})
}

// undoFresh undoes an acquisition by an owner made for that one call: it
// marks the attempt undone, then releases what the owner holds. It can be
// repeated.
func (m *Mutex) undoFresh(ctx context.Context, owner, mark string) {
	keys := withMarker(m.relKeys, mark)
	args := []string{owner, "0", m.markArg, "0"}
	_ = idempotent(ctx, func(ctx context.Context) error {
		return m.c.lua(scripts.MutexUndoFresh).Exec(ctx, m.c.rc, keys, args).Error()
	})
}

// undo releases the acquisition made by the attempt with marker, if the
// acquire script applied it, and nothing otherwise. It can be repeated.
func (m *Mutex) undo(ctx context.Context, owner, marker string) {
	keys := withMarker(m.relKeys, marker)
	args := []string{owner, "0", m.markArg}
	_ = idempotent(ctx, func(ctx context.Context) error {
		return m.c.lua(scripts.MutexUndo).Exec(ctx, m.c.rc, keys, args).Error()
	})
}

// acquireRedis runs the acquire script in the wait loop (waitLoop) until
// the lock is held, ctx is done or Redis fails; the release message comes
// on m.ch, and the fallback is the holder's remaining lease.
//
// reentered reports that the owner already held the lock through another
// Client, so only the count in Redis grew.
//
// While it waits, each failed attempt registers the goroutines of this
// Client that wait for m (the caller and st's queue) in the waiting hash,
// for Inspect; the acquisition or the end of the wait removes the entry.
func (m *Mutex) acquireRedis(ctx context.Context, st *mutexState, owner string, try bool) (h *hold, reentered bool, attempts int, err error) {
	c := m.c
	a := mutexAttempt{m: m, st: st, ctx: ctx, owner: owner, try: try}
	a.args = make([]string, 4, 7) // 3 more for a wait (below): one allocation
	a.args[0], a.args[1], a.args[2], a.args[3] = owner, m.leaseArg, m.blockArg, "set"
	// An owner the caller supplied may hold the lock through another Client
	// too; an attempt marker lets a lost reply be undone exactly (undo).
	a.fresh = freshOwner(ctx)
	if a.fresh {
		// An owner made for this call holds nothing else, so its undo
		// releases whatever it holds; the mark only makes an acquire that
		// arrives after the undo a no-op. The acquire checks it and never
		// writes it: a successful acquisition leaves no key.
		a.marker = m.key + ":x:" + owner
		a.args[3] = "check"
	} else {
		a.marker = m.key + ":a:" + c.attemptID()
	}
	a.keys = []string{m.key, a.marker, m.wkey}
	if !try {
		a.args = append(a.args, c.ident, "", "0")
		defer func() {
			if a.registered && h == nil {
				m.unregister(st)
			}
		}()
	}
	attempts, err = waitLoop(c, ctx, m.ch, try, mutexWait{&a})
	vals := a.vals
	if err != nil || vals[0] == 0 {
		return nil, false, attempts, err
	}
	if !a.fresh {
		c.dropMarker(a.marker)
	}
	h = m.newHold(owner, uint64(vals[1]))
	if vals[0] == 1 {
		h.rToken = h.token + uint64(m.block) - 1
	}
	if !h.track(a.sentAt, m.lease()) {
		_, _ = m.release(ctx, owner, h.rToken, h.token)
		return nil, false, attempts, ErrClosed
	}
	return h, vals[0] == 2, attempts, nil
}

// mutexAttempt is the state of one Mutex acquisition in Redis.
type mutexAttempt struct {
	m          *Mutex
	st         *mutexState
	ctx        context.Context
	owner      string
	try, fresh bool
	marker     string
	keys, args []string
	vals       []int64   // the last attempt's reply
	sentAt     time.Time // when it was sent
	// The waiting count is registered at the first failed attempt, then
	// again when this Client's count changed or lease/6 passed (entries
	// live a lease; attempts come at least every lease/3).
	registered bool
	regCount   string
	regAt      time.Time
}

// mutexWait is a Mutex acquisition's waitProto.
type mutexWait struct{ a *mutexAttempt }

func (w mutexWait) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	a, m := w.a, w.a.m
	c := m.c
	if !a.try {
		a.st.mu.Lock()
		n := strconv.Itoa(1 + len(a.st.queue))
		a.st.mu.Unlock()
		a.args[5] = ""
		if !a.registered || n != a.regCount || time.Since(a.regAt) > c.cfg.lease/6 {
			a.args[5] = n
		}
		if a.registered {
			a.args[6] = "1"
		}
	}
	a.sentAt = time.Now()
	vals, err := c.execAcquire(ctx, &m.lc, scripts.MutexAcquire, a.keys, a.args) // WAIT with WithReplicaSync
	a.vals = vals
	if err == nil && len(vals) != 2 {
		err = errors.New("dsync: unexpected reply from the acquire script")
	}
	if err != nil || vals[0] != 0 {
		return true, 0, err
	}
	if !a.try && a.args[5] != "" {
		a.registered, a.regCount, a.regAt = true, a.args[5], a.sentAt
	}
	return false, time.Duration(vals[1]) * time.Millisecond, nil // the holder's pttl
}

func (w mutexWait) failed(err error) {
	a, m := w.a, w.a.m
	c := m.c
	owner, marker := a.owner, a.marker
	switch {
	case isRedisErr(err):
	case errors.Is(err, ErrNotReplicated) && len(a.vals) == 2 && a.vals[0] == 1:
		// Acquired, not synced: undone by its token before the call
		// returns, as ErrNotReplicated says.
		_, _ = m.release(a.ctx, owner, uint64(a.vals[1])+uint64(m.block)-1, uint64(a.vals[1]))
	case a.fresh:
		// An owner made for this call alone holds nothing else: mark the
		// attempt undone, then release it. Exact, so it runs in the
		// background and the call returns by its deadline.
		c.background(func(bctx context.Context) { m.undoFresh(bctx, owner, marker) })
	default:
		// The script may have run with its reply lost (or was a re-entry
		// replicas did not acknowledge): undo exactly this attempt,
		// whatever else the owner holds.
		c.background(func(bctx context.Context) { m.undo(bctx, owner, marker) })
	}
}

func (w mutexWait) waiting() { w.a.m.c.blocked(w.a.ctx, w.a.m.lockInfo(), w.a.m.key) }

func (mutexWait) gaveUp() {} // the entry in the waiting count goes in acquireRedis
