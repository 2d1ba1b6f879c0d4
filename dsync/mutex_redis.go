package dsync

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// The Mutex's conversation with Redis: the acquire in the wait loop, the
// release, and the exact undo of an attempt whose reply was lost.

// release runs the release script (token 0: any hold of owner); used is
// the last fencing token issued under the hold (0: unknown), which the free
// marker records. A release of a known hold is retried after a lost reply,
// which the script makes safe, and completes even if ctx ends (see
// idempotent).
func (m *Mutex) release(ctx context.Context, owner string, token, used uint64) (code int64, err error) {
	return m.releaseTagged(ctx, owner, token, used, "", nil)
}

// releaseTagged is release with the hold's value "<owner> <token> 1"
// (hold.renewValue) when the caller has it ("" otherwise): the token's
// digits are then taken from it, and the common release allocates nothing
// (its arguments are on the stack: scripts.AppendMutexReleaseArgs);
// and with the hold-tag changes to send ahead of it in its pipeline, if
// any (pre: see Client.tagsBefore).
func (m *Mutex) releaseTagged(ctx context.Context, owner string, token, used uint64, tag string, pre *tagBatch) (code int64, err error) {
	var buf [4]string
	args := scripts.AppendMutexReleaseArgs(buf[:0], owner, token, used, tag)
	call := func(ctx context.Context) (err error) {
		if pre != nil {
			code, err = m.c.execAfter(ctx, &pre, scripts.MutexRelease, m.relBuf[:1], args).AsInt64()
			return err
		}
		code, err = m.c.runScript(ctx, scripts.MutexRelease, m.relBuf[:1], args).AsInt64()
		return err
	}
	if pre != nil {
		defer func() { m.c.finishTags(pre) }()
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

// unregister removes the entry of the wait with attempt marker marker
// from m's waiting count when the wait ends without the lock, and with
// the last entry the value's mark that someone waits. Entries are per
// wait (mutex_acquire.lua): sent in the background, the removal may come
// after a newer wait of this Client (a goroutine queued here, or a new
// call) registered, and leaves that wait's entry and the mark alone. A
// wait by an owner made for it alone (fresh; "" otherwise) may have been
// granted the lock as it gave up: the removal releases that grant.
func (m *Mutex) unregister(marker, fresh string) {
	m.c.background(func(ctx context.Context) { m.unwait(ctx, marker, fresh) })
}

// unwait removes the entry of the wait with attempt marker marker from the
// waiting count, and releases a grant to fresh (see unregister).
func (m *Mutex) unwait(ctx context.Context, marker, fresh string) {
	c := m.c
	wait := marker[len(marker)-8:] // as mutex_acquire.lua names the wait
	// The waiting count: "<goroutines> <expiry ms>" by waiting Client.
	x := scripts.MutexUnwaitCall(m.key, c.ident, wait, fresh, m.leaseArg)
	_ = idempotent(ctx, func(ctx context.Context) error {
		return c.run(ctx, x).Error()
	})
}

// grantUnclaimed releases a Mutex grant (lib.lua's lock_grant) published
// on ch to id, an owner this Client made for one wait, when no wait of the
// Client took it: the wait is gone (it gave up, and its own release of the
// grant may not have reached Redis: a failover, a cut), or its
// subscription was not registered yet (then its next attempt queues it
// again). Only a grant Redis still has, unclaimed, is released (on to the
// next wait): mutex_unwait.lua. Grants of other channels (FIFO locks),
// and to other Clients' owners, are not this Client's to release.
func (c *Client) grantUnclaimed(ch, id string) {
	key, ok := strings.CutSuffix(ch, ":ch")
	if !ok || !strings.HasSuffix(key, ":mutex") || len(id) != len(c.ident)+16 || !strings.HasPrefix(id, c.ident) {
		return
	}
	c.background(func(ctx context.Context) {
		_ = idempotent(ctx, func(ctx context.Context) error {
			return c.run(ctx, scripts.MutexUnwaitCall(key, c.ident, id[len(id)-8:], id, "")).Error()
		})
	})
}

// undoFresh undoes an acquisition by an owner made for that one call: it
// marks the attempt undone, then releases what the owner holds. It can be
// repeated.
func (m *Mutex) undoFresh(ctx context.Context, owner, mark string) {
	x := scripts.MutexUndoFreshCall(m.key, mark, owner)
	_ = idempotent(ctx, func(ctx context.Context) error {
		return m.c.run(ctx, x).Error()
	})
}

// undo releases the acquisition made by the attempt with marker, if the
// acquire script applied it, and nothing otherwise. It can be repeated.
func (m *Mutex) undo(ctx context.Context, owner, marker string) {
	x := scripts.MutexUndoCall(m.key, marker, owner)
	_ = idempotent(ctx, func(ctx context.Context) error {
		return m.c.run(ctx, x).Error()
	})
}

// acquireRedis runs the acquire script in the wait loop (waitLoop) until
// the lock is held, ctx is done or Redis fails; the release message comes
// on m.ch(), and the fallback is the holder's remaining lease.
//
// reentered reports that the owner already held the lock through another
// Client, so only the count in Redis grew.
//
// While it waits, each failed attempt registers the goroutines of this
// Client that wait for m (the caller and st's queue) in the waiting hash,
// for Inspect; the acquisition or the end of the wait removes the entry.
//
// fo is a fresh owner's bytes (mark's), with room for the hold's value
// prefix (ownerTag), and the room for its hold (nil for an owner the
// caller supplied): a new hold's renewTag is made there, before the renewal
// loop can see the hold, rather than by its first renewal. queued: the
// caller is counted among the Client's local waiters (it queued before it
// led); else it is counted there from its first failed attempt on, so
// that the goroutines queued behind it and it add up (see localWaiters).
func (m *Mutex) acquireRedis(ctx context.Context, st *mutexState, owner, mark string, fo *freshMutexOwner, try, queued bool, granted *bool) (h *hold, reentered bool, attempts int, err error) {
	c := m.c
	// The attempt (arguments and reply in place) comes from a pool: a
	// held lock's state keeps none.
	a := attemptPool.Get().(*mutexAttempt)
	*a = mutexAttempt{m: m, st: st, ctx: ctx, owner: owner, try: try, counted: queued}
	defer func() {
		if a.counted && !queued {
			c.waits.add(m.key, -1, true)
		}
		*a = mutexAttempt{}
		attemptPool.Put(a)
	}()
	// An owner the caller supplied may hold the lock through another Client
	// too; an attempt marker lets a lost reply be undone exactly (undo).
	a.fresh = mark != ""
	if a.fresh {
		// An owner made for this call holds nothing else, so its undo
		// releases whatever it holds; the mark only makes an acquire that
		// arrives after the undo a no-op. The acquire checks it and never
		// writes it: a successful acquisition leaves no key. The script
		// names it itself (the lock key, ":x:", the owner): no key
		// argument.
		a.marker = mark
		a.keys = scripts.AppendMutexAcquireKeys(a.keyBuf[:0], m.key, "")
		a.dl = ownerDeadline(owner)
	} else {
		a.marker = m.key + ":a:" + c.attemptID()
		a.keys = scripts.AppendMutexAcquireKeys(a.keyBuf[:0], m.key, a.marker)
	}
	if !try {
		defer func() {
			if a.registered && h == nil {
				m.unregister(a.marker, a.grantee())
			}
		}()
	}
	attempts, err = waitLoop(c, ctx, m.ch(), a.grantee(), try, mutexWait{a})
	r := a.r
	if err != nil || !r.held() {
		return nil, false, attempts, err
	}
	if !a.fresh {
		c.dropMarker(a.marker)
	}
	if err := leaseSpent(a.sentAt, m.lease()); err != nil {
		tok, last := r.token(), r.token()
		if r.code == acqAcquired {
			last += uint64(a.block) - 1
		}
		_, _ = m.release(ctx, owner, last, tok)
		return nil, false, attempts, err
	}
	if fo != nil {
		h = &fo.h
		m.initHold(h, owner, r.token())
	} else {
		h = m.newHold(owner, r.token())
	}
	if r.code == acqAcquired {
		h.rToken = h.token + uint64(a.block) - 1
	}
	if fo != nil && r.code != acqReentered {
		h.renewTag = ownerTag(fo.bytes(mark), len(mark)-len(owner), h.rToken)
	}
	if !h.track(a.sentAt, m.lease()) {
		_, _ = m.release(ctx, owner, h.rToken, h.token)
		return nil, false, attempts, ErrClosed
	}
	*granted = a.granted
	return h, r.code == acqReentered, attempts, nil
}

// mutexAttempt is the state of one Mutex acquisition in Redis, its
// arguments and reply in place (one allocation).
type mutexAttempt struct {
	argBuf     [6]string
	keyBuf     [2]string
	m          *Mutex
	st         *mutexState
	ctx        context.Context
	owner      string
	try, fresh bool
	counted    bool // the wait is counted among the Client's local waiters
	// dl is a fresh owner's deadline (ownerDeadline; 0: none, or no more
	// for this wait), oneArg that the attempt in flight, or the last, was
	// sent as the owner alone: its copy may apply until dl.
	dl         int64
	oneArg     bool
	marker     string
	keys, args []string
	valBuf     [3]int64  // room for the last attempt's reply
	r          acqReply  // the last attempt's reply (zero: none)
	sentAt     time.Time // when it was sent
	block      int       // tokens the last attempt reserved
	// The waiting count is registered at the first failed attempt, then
	// again when this Client's count changed or lease/6 passed (entries
	// live a lease; attempts come at least every lease/3).
	registered bool
	regCount   string
	regAt      time.Time
	regNow     string // the count the attempt in flight registers, or ""
	granted    bool   // a release granted the lock (mutexWait.granted)
}

var attemptPool = sync.Pool{New: func() any { return new(mutexAttempt) }}

// mutexWait is a Mutex acquisition's waitProto.
type mutexWait struct{ a *mutexAttempt }

func (w mutexWait) attempt(ctx context.Context, n int) (bool, time.Duration, error) {
	a, m := w.a, w.a.m
	c := m.c
	// A block of tokens only when goroutines of this Client wait to be
	// handed the lock (see reservedLocked): with a block the value says
	// so, and the owner cannot re-enter through another Client (its
	// Client may hand the lock to another owner without telling Redis).
	a.st.mu.Lock()
	waiting := len(a.st.queue)
	a.st.mu.Unlock()
	a.block = 1
	if waiting > 0 {
		a.block = m.block
	}
	// The arguments (mutex_acquire.lua), those that are the script's
	// defaults left out: for a wait the count of this Client's goroutines
	// that wait, to register (the first attempt, when it changed, or every
	// lease/6: "" not this time); the block, when one is reserved. So the
	// uncontended acquisition sends three.
	a.regNow = ""
	if !a.try {
		n := strconv.Itoa(1 + waiting)
		if !a.registered || n != a.regCount || time.Since(a.regAt) > c.cfg.lease/6 {
			a.regNow = n
		}
	}
	reserve := "1"
	if a.block > 1 {
		reserve = m.blockArg
	}
	// The first attempt of a wait by a fresh owner with a deadline, at the
	// Client's default lease, nothing to reserve, is the owner alone: the
	// script takes the default lease and the Client from the owner, and
	// does nothing once the server clock has reached the deadline (see
	// srvclock.go).
	alone := a.dl != 0 && m.leaseArg == c.args.lease && c.cfg.lease == DefaultLease
	a.args = scripts.AppendMutexAcquireArgs(a.argBuf[:0], a.owner, m.leaseArg, !a.try, c.ident, a.regNow, a.registered, reserve, alone)
	a.oneArg = len(a.args) == 1
	a.sentAt = time.Now()
	var vals []int64
	var err error
	if !c.inDoubt(ctx) {
		vals, err = c.execAcquireInto(ctx, m.lc, scripts.MutexAcquire, a.keys, a.args, a.valBuf[:0]) // WAIT with WithReplicaSync
	} else {
		// A connection may be being opened: bounded (its reply, if it
		// comes after the caller left, is lost and undone as any other;
		// the call may outlive the wait, so it gets its own arguments).
		keys, args := slices.Clone(a.keys), slices.Clone(a.args)
		vals, err = bounded(c, ctx, func(ctx context.Context) ([]int64, error) {
			return c.execAcquireInto(ctx, m.lc, scripts.MutexAcquire, keys, args, nil)
		})
	}
	a.r, _ = decodeAcq(vals)
	if err == nil && len(vals) < 2 {
		err = errors.New("dsync: unexpected reply from the acquire script")
	}
	if err == nil {
		switch {
		case a.r.srvUS > 0:
			// The token is the server clock (the one-argument form).
			c.srv.see(a.r.srvUS, time.Now())
		case a.r.code == acqLate:
			// The deadline had passed when the attempt ran (the Client's
			// clock of the server was behind): it did nothing. Again,
			// with every argument, for the rest of the wait.
			c.srv.see(a.r.value, time.Now())
			a.dl = 0
			return w.attempt(ctx, n)
		case a.r.code == acqAcquired && !c.srv.known():
			// A first reading: a token is at least the server clock.
			c.srv.see(a.r.value, time.Now())
		}
	}
	if err != nil || a.r.code != acqWaiting {
		return true, 0, err
	}
	if !a.try && a.regNow != "" {
		a.registered, a.regCount, a.regAt = true, a.regNow, a.sentAt
	}
	return false, a.r.hint(), nil // the holder's pttl
}

func (w mutexWait) failed(err error) {
	a, m := w.a, w.a.m
	c := m.c
	owner, marker := a.owner, a.marker
	// An attempt sent to register the wait may have done so though its
	// reply was lost (the caller's deadline came first), as may a
	// registered wait's attempt that renewed its entry. The undo below
	// tombstones the attempt first, so that it is a no-op if it arrives
	// later (rueidis may send the undo on another connection); after the
	// undo the entry is removed, here rather than by acquireRedis (whose
	// removal could come before the attempt).
	reg := !a.try && (a.registered || a.regNow != "")
	grantee := a.grantee()
	unwait := func(ctx context.Context) {
		if reg {
			m.unwait(ctx, marker, grantee)
		}
	}
	switch {
	case isRedisErr(err):
	case errors.Is(err, ErrNotReplicated) && a.r.code == acqAcquired:
		// Acquired, not synced: undone by its token before the call
		// returns, as ErrNotReplicated says.
		_, _ = m.release(a.ctx, owner, a.r.token()+uint64(a.block)-1, a.r.token())
		if !a.fresh {
			c.dropMarker(marker) // "1": the exact undo it is for is not needed
		}
	case a.fresh:
		// An owner made for this call alone holds nothing else: mark the
		// attempt undone, then release it. Exact, so it runs in the
		// background and the call returns by its deadline.
		a.registered = false
		c.background(func(bctx context.Context) { m.undoFresh(bctx, owner, marker); unwait(bctx) })
		if a.oneArg {
			// No mark stops a copy of the owner-alone attempt that
			// arrives after the undo: its deadline does (lateUndo).
			m.lateUndo(owner, marker, a.dl)
		}
	default:
		// The script may have run with its reply lost (or was a re-entry
		// replicas did not acknowledge): undo exactly this attempt,
		// whatever else the owner holds.
		a.registered = false
		c.background(func(bctx context.Context) { m.undo(bctx, owner, marker); unwait(bctx) })
	}
}

func (w mutexWait) waiting() {
	a := w.a
	if !a.counted && !a.try {
		a.counted = true
		a.m.c.waits.add(a.m.key, 1, true)
	}
	a.m.c.blocked(a.ctx, a.m.lockInfo(), a.m.key)
}

func (mutexWait) gaveUp() {} // the entry in the waiting count goes in acquireRedis

// grantee is the owner a release may grant the lock to (lib.lua's
// lock_grant), the wait's id on m's channel: an owner made for this wait
// alone; "" for a try or an owner the caller supplied, which may hold
// through other Clients: its waits are woken to look again.
func (a *mutexAttempt) grantee() string {
	if a.fresh && !a.try {
		return a.owner
	}
	return ""
}

// granted ends the wait with the lock a release granted it, as the reply
// of an attempt that acquired would have; its lease clock starts at the
// grant (grantStart). A grant that cannot be dated after the last attempt,
// or with less than half its lease left by now, is claimed again by the
// next attempt instead (grantClock).
func (w mutexWait) granted(tok, at uint64) bool {
	a := w.a
	start, live := grantClock(a.sentAt, a.r.srvAt(), at, a.m.lease())
	if !live {
		return false
	}
	a.r = acqReply{code: acqAcquired, value: int64(tok)}
	a.block = 1 // a grant reserves no block
	a.sentAt = start
	a.granted = true
	return true
}

func (mutexWait) grantsShared() {}
