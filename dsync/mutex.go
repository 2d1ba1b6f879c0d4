package dsync

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// freeMarkerTTL is how long a mutex yielded to other processes (see
// passOnLocked) is kept as "free, last token T", so the next token
// continues from T rather than from the clock. A plain release keeps the
// marker for the rest of the hold's lease instead (mutex_release.lua).
const freeMarkerTTL = time.Hour

// A Mutex is a mutual exclusion lock shared by every Client, in any process,
// that uses the same key prefix and name. It is reentrant by owner (see
// WithOwner): each acquisition needs its own release. Lock, Unlock and
// TryLock make it a sync.Locker that, like sync.Mutex, is not reentrant and
// may be unlocked by any goroutine. A hold handed on inside a Client (see
// WithMaxLocalHandoffs) is re-entered and released through that Client only.
//
// A Mutex is safe for concurrent use. Its zero value is not usable; create
// Mutexes with Client.NewMutex. A Mutex may be copied only before first use.
type Mutex struct {
	c    *Client
	info Lock        // its name, for events and errors
	key  string      // the lock value "<owner> <token> <count>"
	err  error       // a bad name, returned by every call
	lc   *lockConfig // shared by every Mutex made without options (noLockConfig)

	// Arguments computed once, so an acquisition does not rebuild them
	// (those all Mutexes of the Client share are the Client's).
	relBuf   [2]string // {key, wakeup channel (published on release)}: relKeys
	leaseArg string    // lease of a new hold, in ms
	// block is how many fencing tokens a Redis acquisition or handoff
	// reserves: the first for its holder, the others for handoffs inside
	// this Client that need no round trip. 1 with a fixed lease, since each
	// hold must then start its own lease in Redis.
	block    int
	blockArg string

	lk lockerHolds // the hold taken by Lock or TryLock
}

// ch is m's wakeup channel, published on release.
func (m *Mutex) ch() string { return m.relBuf[1] }

// relKeys are the keys of the release and the handoff: the lock's key and
// its wakeup channel (a slice of the Mutex's own array, not one more field).
func (m *Mutex) relKeys() []string { return m.relBuf[:] }

// sk names m's state in the Client's registry.
func (m *Mutex) sk() stateKey { return stateKey{key: m.key} }

// NewMutex returns the mutex called name. An invalid name (empty, or longer
// than MaxNameLen) makes every call fail with ErrInvalidArgument.
func (c *Client) NewMutex(name string, opts ...LockOption) *Mutex {
	// The key and the channel in one string of 24 B: the key is the
	// channel's start. (The waiting count's key is made when needed: see
	// unregister.)
	ch := c.lockKey("mutex:ch", name)
	key := ch[:len(ch)-len(":ch")]
	m := &Mutex{c: c, info: Lock{Kind: KindMutex, Name: name, N: 1}, key: key, err: checkName(name), lc: &noLockConfig}
	if lc := newLockConfig(opts); lc != noLockConfig {
		m.lc = &lc
	}
	m.relBuf = scripts.MutexHandoffKeys(key, ch)
	m.leaseArg, m.block, m.blockArg = c.args.lease, 1, "1"
	if m.lc.leaseTime > 0 {
		m.leaseArg = leaseMS(m.lc.leaseTime)
	} else if c.cfg.handoffs > 0 {
		m.block, m.blockArg = c.cfg.handoffs, c.args.handoffs
	}
	return m
}

// Lock acquires m, blocking until it is held. It retries through Redis
// errors, logging them, and panics if the Client is closed or the name is
// invalid.
func (m *Mutex) Lock() { lockerLock(m, &m.lk) }

// TryLock tries to acquire m without waiting and reports whether it did. It
// returns false on any error.
func (m *Mutex) TryLock() bool { return lockerTryLock(m, &m.lk) }

// Unlock releases the hold taken by Lock or TryLock. It is a run-time error
// (a panic) if m was not locked by Lock or TryLock. A failed release is
// logged; the lock then expires with its lease.
func (m *Mutex) Unlock() { lockerUnlock(m, &m.lk, "unlock") }

func (m *Mutex) lockFor(ctx context.Context, try bool) (context.Context, bool, error) {
	return m.lock(ctx, try)
}

// unlockFor needs no context carrying the owner (an allocation per Unlock).
func (m *Mutex) unlockFor(owner string) error { return m.unlock(context.Background(), owner, true) }

func (m *Mutex) lockerEnv() (string, string, *slog.Logger, *Client) {
	return "Mutex", m.info.Name, m.c.cfg.logger, m.c
}

// LockContext acquires m for the owner ctx carries (a fresh one if none),
// waiting until it is held or ctx is done. It returns the lock context:
// derived from ctx, carrying the owner and the fencing token, and cancelled
// when the hold is released or lost (cause ErrLockLost). It also ends with
// ctx, which does not release m. A wait ended by ctx returns an error
// matching ctx.Err().
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	lctx, _, err := m.lock(ctx, false)
	return lctx, err
}

// TryLockContext is LockContext without waiting: when another owner holds m
// it returns false and a nil error.
func (m *Mutex) TryLockContext(ctx context.Context) (context.Context, bool, error) {
	return m.lock(ctx, true)
}

// UnlockContext releases one acquisition by the owner ctx carries, even if
// ctx is cancelled. It returns ErrNotHeld if that owner does not hold m, and
// ErrWrongContext if ctx carries no hold of m (the parent context, say, or
// a lock context of another Client): m then stays held.
func (m *Mutex) UnlockContext(ctx context.Context) error {
	var owner string
	var ok bool
	if ctx != nil {
		owner, ok = OwnerOf(ctx)
	}
	err := releaseErr(ctx, m.unlock(ctx, owner, ok))
	if err != nil && ctx != nil && ctxErr(ctx) == nil {
		err = ownErr(err) // a context error of rueidis' own, not ctx's
	}
	return err
}

// unlock releases one acquisition by owner (ok false: ctx carried none).
func (m *Mutex) unlock(ctx context.Context, owner string, ok bool) error {
	if ctx == nil {
		return &lockError{kind: KindMutex, name: m.info.Name, err: fmt.Errorf("%w: nil context: pass the lock context LockContext returned", ErrInvalidArgument)}
	}
	if m.err != nil {
		return m.err
	}
	c := m.c
	if err := c.enter(); err != nil {
		return err
	}
	defer c.exit()
	ctx = releaseCtx(ctx)
	if !ok {
		return notHeld(ctx, KindMutex, m.info.Name, "LockContext", false)
	}
	if err := c.otherClient(ctx, KindMutex, m.info.Name, "UnlockContext"); err != nil {
		return err
	}
	// Redis is told under ctx only if it bounds the release in time. Else
	// (sync.Locker's Unlock; the lock context of a watchdog hold whose
	// caller gave no deadline, context.Background()'s) under a context
	// that cannot be cancelled, context.Background(): rueidis answers a
	// call on the caller's goroutine, with no goroutine of its own in
	// between, only under a context that has a deadline or cannot be
	// cancelled (pipe.Do). One call under a cancellable context without a
	// deadline (the Client's, which such releases ran under before) moved
	// the connection to its pipelining goroutines for good: about 25 us
	// more per Lock/Unlock cycle of a caller who locks one lock at a time.
	// The release is then bounded as rueidis bounds its own calls
	// (ClientOption.ConnWriteTimeout, 10 s by default: the connection's
	// deadline, and the PINGs that find a server that stopped answering),
	// and Close does not cut it shorter. (ctx itself, a lock context,
	// would make its Done channel for this call alone.)
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		rctx = context.Background()
	} else if lc, ok := ctx.(*lockCtx); ok && lc.h.watchdog {
		// A lock context's deadline is its parent's (a watchdog hold has
		// no lease end): bound the release by the parent, whose Done
		// channel the caller's other calls share, rather than make the
		// lock context's own for this call alone. The lock context ends
		// with the hold, after the release.
		rctx = lc.parent
	}
	st := c.getMutex(m.sk())
	defer c.putMutex(m.sk(), st)
	st.mu.Lock()
	h := st.h
	if h != nil && h.owner != owner && h.rOwner == owner {
		// Handed on from owner to another goroutine here, without a round
		// trip: Redis still names owner, so a release by owner (a second
		// Unlock) must not reach it, or it would free the lock under the
		// goroutine that holds it now.
		st.mu.Unlock()
		return notHeld(ctx, KindMutex, m.info.Name, "LockContext", true)
	}
	if h == nil || h.owner != owner {
		st.mu.Unlock()
		if otherLock(ctx, KindMutex, m.info.Name) {
			// Another lock's lock context, not held here: its owner's
			// hold through another Client is not ctx's to release.
			return notHeld(ctx, KindMutex, m.info.Name, "LockContext", true)
		}
		// Not held through this Client: the owner may hold it through
		// another Client, so ask Redis.
		code, err := m.release(rctx, owner, 0, 0)
		if err == nil && code == 0 {
			err = notHeld(ctx, KindMutex, m.info.Name, "LockContext", true)
		}
		if err == nil {
			c.tellReleasedByOwner(ctx, m.info.Name)
		}
		return wrapErr(KindMutex, m.info.Name, err)
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
	err := m.passOnLocked(rctx, st, h)
	m.observeRelease(ctx, h, err, true)
	return err
}

func (m *Mutex) observeRelease(ctx context.Context, h *hold, err error, complete bool) {
	if f := m.c.cfg.observer.Released; f != nil {
		f(ctx, Released{Lock: *h.lock, Hold: h.id, Held: h.held(), Err: err, Complete: complete})
	}
}

func (m *Mutex) lockInfo() Lock { return m.info }

func (m *Mutex) lock(ctx context.Context, try bool) (context.Context, bool, error) {
	c := m.c
	if err := c.checkCall(ctx, m.err); err != nil {
		return nil, false, wrapErr(KindMutex, m.info.Name, err)
	}
	if err := c.enter(); err != nil {
		return nil, false, err
	}
	defer c.exit()
	// An owner made for this call (ctx brings none) is fresh: nobody else
	// knows it, so the acquisition needs no attempt marker of its own (see
	// acquireRedis). Its undo mark's key ends with it: both are one string.
	// ctx itself need not carry it: the lock context does.
	// Its bytes have room for the hold's value prefix (ownerTag), which
	// the release sends. Once the Client knows the server clock it carries
	// a deadline (srvclock.go), which lets its wait's first attempt go as
	// the owner alone.
	// The owner's bytes and the hold it makes in Redis are one allocation
	// (freshMutexOwner).
	owner, ok := OwnerOf(ctx)
	var mark string
	var fo *freshMutexOwner
	if !ok {
		var n uint32
		dl := c.srv.deadline()
		if dl != 0 {
			n = c.ownerSeq.Add(1)
		}
		fo = new(freshMutexOwner)
		b := appendDeadlineOwner(fo.arr[:0], m.key, ":x:", c.ident, dl, n, ownerTagRoom)
		mark = unsafe.String(unsafe.SliceData(b), len(b))
		owner = mark[len(m.key)+len(":x:"):]
	}
	ctx, ob := c.observe(ctx, m.lockInfo(), owner, try)
	lctx, h, reentered, attempts, err := m.acquire(ctx, owner, mark, fo, try, &ob)
	ob.done(h, reentered, attempts, err)
	return lctx, h != nil, wrapErr(KindMutex, m.info.Name, err)
}

func (m *Mutex) lease() time.Duration {
	return m.lc.lease(m.c)
}

func (m *Mutex) newHold(owner string, token uint64) *hold {
	h := new(hold)
	m.initHold(h, owner, token)
	return h
}

// initHold makes *h a new hold of m (newHold) in place.
func (m *Mutex) initHold(h *hold, owner string, token uint64) {
	m.c.initHold(h, &m.info, owner, token)
	h.key = m.key
	h.watchdog = m.lc.leaseTime == 0
	h.ops = m
}

// A Mutex is the holdOps of its holds.

func (m *Mutex) renewIn(h *hold) (*rueidis.Lua, []string, []string) {
	keys, args := scripts.AppendMutexRenewManyHold(nil, nil, m.key, h.renewValue())
	return scripts.MutexRenewMany, keys, args
}

func (m *Mutex) renewKey(h *hold) (key, value string, ok bool) {
	return m.key, h.renewValue(), true
}

func (m *Mutex) releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec) {
	return scripts.MutexRelease, rueidis.LuaExec{Keys: m.relBuf[:1], Args: scripts.AppendMutexReleaseArgs(nil, h.rOwner, h.rToken, h.token, "")}
}

// releaseKey makes a Mutex a batchReleaser: Close releases its known holds
// with MutexReleaseMany, as releaseExec's MutexRelease would one by one.
func (m *Mutex) releaseKey(h *hold) (key, owner string, token, used uint64, ok bool) {
	return m.key, h.rOwner, h.rToken, h.token, h.rToken != 0
}

func (m *Mutex) ended(h *hold, lost bool) {
	if lost {
		m.lost(h)
	}
}

// lost forgets a lost hold, so the next local waiter can try.
func (m *Mutex) lost(h *hold) {
	c := m.c
	st := c.getMutex(m.sk())
	st.mu.Lock()
	if st.h == h {
		st.h = nil
		st.wakeNextLocked()
		st.mu.Unlock()
		c.putMutex(m.sk(), st) // the hold's reference
	} else {
		st.mu.Unlock()
	}
	c.putMutex(m.sk(), st)
}
