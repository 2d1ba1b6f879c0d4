package dsync

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A qlock is the machinery FairMutex and RWMutex share: a lock taken by one
// script call per attempt, waited for on a wakeup channel, held through a
// per-Client hold slot (a mutexState of which only h is used) so that the
// goroutines of one owner share one hold. Waiting puts the owner in a
// Redis queue, and a release grants the lock to the head of the queue and
// tells its wait on the Client's channel, by the wait's id (see
// fair_lib.lua, rw_lib.lua). What a kind sends to Redis is its qproto.
type qlock struct {
	c    *Client
	info Lock
	err  error // a bad name, returned by every call
	lc   lockConfig
	p    qproto
	base string // the lock's key, to name attempt markers

	// rwWrite and rwRead name the RWMutex (its key) this qlock is the
	// write or the read lock of, for downgrades (see rwBase).
	rwWrite, rwRead string
}

// A qproto is what one kind of qlock sends to Redis: its keys, scripts and
// their argument layouts. FairMutex's is fairProto (an Election's, which
// ends the term at Close, electionProto), each RWMutex mode's an rwProto.
type qproto interface {
	// slot is the Client's hold slot for owner.
	slot(owner string) stateKey
	// channel is the one this Client's waits are woken and granted on.
	channel() string
	// step makes one attempt: {1|2, token} held, {0, ms[, µs]} look again
	// within ms (the server time in µs, for a grant's lease clock).
	step(ctx context.Context, lc *lockConfig, a stepArgs) ([]int64, error)
	// leave takes the wait wid of owner out of the queue.
	leave(ctx context.Context, owner, wid string) error
	// release is the release of owner's hold with token (0: any hold of
	// owner).
	release(owner string, token uint64) scripts.Call
	// retryRelease: the release script makes a retried release a no-op.
	retryRelease() bool
	// undo releases what the attempt of owner behind marker acquired (a
	// hold of owner, as release with token 0); fresh: it marks the attempt
	// undone first, for an owner made for the call.
	undo(owner, marker string, fresh bool) scripts.Call
	// renew gives a hold's batch script, keys and args; ok false: the
	// lock value has the mutex's layout (FairMutex, Election), renewed in
	// the mutex holds' batches.
	renew(owner string, token uint64) (s *rueidis.Lua, keys, args []string, ok bool)
	// closing is the script Close runs for a hold before its release (an
	// Election's: the end of the term; see holdCloser); ok false: none.
	closing(h *hold) (x scripts.Call, ok bool)
}

// stepArgs is one attempt of a qlock acquisition.
type stepArgs struct {
	owner string
	wid   string // the wait's name in the queue
	try   bool   // do not wait: never queue
	// marker is an extra key in which the script records the acquisition,
	// so that undo can take back exactly that attempt (see undoAttempt);
	// with check, the script only checks it (an owner made for the call).
	marker string
	check  bool
}

func (q *qlock) closeExec(h *hold) (*rueidis.Lua, rueidis.LuaExec, bool) {
	x, ok := q.p.closing(h)
	return x.Script, x.LuaExec, ok
}

// rwBase is the context value by which a write lock context of an RWMutex
// records the context the write lock was taken with. A read lock taken
// with the write lock context (a downgrade) is based on that context
// instead, so it is not cancelled when the write lock is released.
type rwBase struct{ key string }

// lockParent returns the parent of the lock context of an acquisition
// with ctx by owner.
func (q *qlock) lockParent(ctx context.Context, owner string) context.Context {
	if q.rwWrite == "" {
		return ctx
	}
	if base, ok := ctx.Value(rwBase{q.rwWrite}).(context.Context); ok {
		if o, _ := OwnerOf(base); o == owner {
			return ctx // a re-entry: the outer acquisition's base stays
		}
	}
	return context.WithValue(ctx, rwBase{q.rwWrite}, ctx)
}

func (q *qlock) lease() time.Duration {
	return q.lc.lease(q.c)
}

func (q *qlock) lockFor(ctx context.Context, try bool) (context.Context, bool, error) {
	return q.lock(ctx, try)
}

func (q *qlock) unlockFor(owner string) error { return q.unlock(ownerOnly(owner)) }

func (q *qlock) lockerEnv() (string, string, *slog.Logger, *Client) {
	what := "FairMutex"
	if q.info.Kind == KindRWMutex {
		what = "RWMutex"
	}
	return what, q.info.Name, q.c.cfg.logger, q.c
}

func (q *qlock) lock(ctx context.Context, try bool) (context.Context, bool, error) {
	c := q.c
	if err := c.checkCall(ctx, q.err); err != nil {
		return nil, false, wrapErr(q.info.Kind, q.info.Name, err)
	}
	if err := c.enter(); err != nil {
		return nil, false, err
	}
	defer c.exit()
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	if q.rwRead != "" {
		if base, ok := ctx.Value(rwBase{q.rwRead}).(context.Context); ok {
			if o, _ := OwnerOf(base); o == owner {
				ctx = base // a downgrade: see rwBase
			}
		}
	}
	ctx, ob := c.observe(ctx, q.info, owner, try)
	lctx, h, reentered, attempts, err := q.acquire(ctx, owner, try)
	ob.done(h, reentered, attempts, err)
	return lctx, h != nil, wrapErr(q.info.Kind, q.info.Name, err)
}

func (q *qlock) acquire(ctx context.Context, owner string, try bool) (lctx context.Context, h *hold, reentered bool, attempts int, err error) {
	c := q.c
	key := q.p.slot(owner)
	st := c.getMutex(key)
	st.mu.Lock()
	if h := st.h; h != nil && h.owner == owner {
		lctx := h.newCtx(q.lockParent(ctx, owner))
		st.mu.Unlock()
		c.putMutex(key, st)
		return lctx, h, true, 0, nil
	}
	st.mu.Unlock()
	r, sentAt, attempts, err := q.wait(ctx, owner, try)
	if err != nil || !r.held() {
		c.putMutex(key, st)
		return nil, nil, false, attempts, err
	}
	tok := r.token()
	st.mu.Lock()
	if h := st.h; h != nil && h.owner == owner {
		// A goroutine of the same owner got the hold meanwhile: share it.
		// A re-entry in Redis counted this acquisition too: take the extra
		// count back. (A grant, acqGranted, is the count of a hold taken
		// before this wait's grant was seen, which only a goroutine of
		// this Client could have claimed; nothing to take back.)
		lctx := h.newCtx(q.lockParent(ctx, owner))
		st.mu.Unlock()
		if r.code != acqGranted {
			_, _ = q.releaseRedis(ctx, owner, tok)
		}
		c.putMutex(key, st)
		return lctx, h, true, attempts, nil
	}
	if err := leaseSpent(sentAt, q.lease()); err != nil {
		st.mu.Unlock()
		_, _ = q.releaseRedis(ctx, owner, tok)
		c.putMutex(key, st)
		return nil, nil, false, attempts, err
	}
	h = q.newHold(owner, tok)
	if r.code == acqGranted {
		h.start = tick(sentAt) // held since the grant, not since it was seen
	}
	if !h.track(sentAt, q.lease()) {
		st.mu.Unlock()
		_, _ = q.releaseRedis(ctx, owner, tok)
		c.putMutex(key, st)
		return nil, nil, false, attempts, ErrClosed
	}
	// A hold of another owner still here was lost in Redis (its lease ran
	// out before its lease clock here did): its ended will find st.h
	// replaced, so its reference is given back now.
	stale := st.h != nil
	st.h = h
	lctx = h.newCtx(q.lockParent(ctx, owner))
	st.mu.Unlock()
	if stale {
		c.putMutex(key, st)
	}
	return lctx, h, r.code == acqReentered, attempts, nil // st's reference is now the hold's
}

func (q *qlock) newHold(owner string, token uint64) *hold {
	c := q.c
	h := c.newHold(&q.info, owner, token)
	h.key = q.base
	h.watchdog = q.lc.leaseTime == 0
	h.ops = q
	return h
}

// A qlock is the holdOps of its holds. A FairMutex's (and an Election's)
// value has the mutex's layout, so its holds are renewed in the mutex
// holds' batches.

func (q *qlock) renewKey(h *hold) (key, value string, ok bool) {
	if _, _, _, ok := q.p.renew(h.owner, h.token); ok {
		return "", "", false
	}
	return q.base, h.renewValue(), true
}

func (q *qlock) renewIn(h *hold) (*rueidis.Lua, []string, []string) {
	s, keys, args, _ := q.p.renew(h.owner, h.token)
	return s, keys, args
}

func (q *qlock) releaseExec(h *hold) (*rueidis.Lua, rueidis.LuaExec) {
	x := q.p.release(h.owner, h.token)
	return x.Script, x.LuaExec
}

// ended forgets a lost hold in its slot.
func (q *qlock) ended(h *hold, lost bool) {
	if !lost {
		return
	}
	c, key := q.c, q.p.slot(h.owner)
	st := c.getMutex(key)
	st.mu.Lock()
	if st.h == h {
		st.h = nil
		st.mu.Unlock()
		c.putMutex(key, st) // the hold's reference
	} else {
		st.mu.Unlock()
	}
	c.putMutex(key, st)
}

// unlock releases one acquisition by the owner ctx carries. The release
// runs even if ctx is already cancelled, since a lost lock's context is.
func (q *qlock) unlock(ctx context.Context) error {
	return releaseErr(ctx, q.release(ctx))
}

// release is unlock, but for the error of a spent budget (releaseErr).
func (q *qlock) release(ctx context.Context) error {
	if ctx == nil {
		return &lockError{kind: q.info.Kind, name: q.info.Name, err: fmt.Errorf("%w: nil context: pass the lock context %s returned", ErrInvalidArgument, q.acquireName())}
	}
	if q.err != nil {
		return q.err
	}
	c := q.c
	if err := c.enter(); err != nil {
		return err
	}
	defer c.exit()
	ctx = releaseCtx(ctx)
	owner, ok := OwnerOf(ctx)
	if !ok {
		return notHeld(ctx, q.info.Kind, q.info.Name, q.acquireName(), false)
	}
	if err := c.otherClient(ctx, q.info.Kind, q.info.Name, q.releaseName()); err != nil {
		return err
	}
	key := q.p.slot(owner)
	st := c.getMutex(key)
	defer c.putMutex(key, st)
	st.mu.Lock()
	h := st.h
	if h == nil || h.owner != owner {
		st.mu.Unlock()
		if otherLock(ctx, q.info.Kind, q.info.Name) {
			// Another lock's lock context, not held here (as Mutex.unlock).
			return notHeld(ctx, q.info.Kind, q.info.Name, q.acquireName(), true)
		}
		// Not held through this Client: the owner may hold it through
		// another Client, so ask Redis.
		code, err := q.releaseRedis(ctx, owner, 0)
		if err == nil && code == 0 {
			err = notHeld(ctx, q.info.Kind, q.info.Name, q.acquireName(), true)
		}
		if err == nil {
			c.tellReleasedByOwner(ctx, q.info.Name)
		}
		return wrapErr(q.info.Kind, q.info.Name, err)
	}
	if h.pop() > 0 {
		st.mu.Unlock()
		q.observeRelease(ctx, h, nil, false)
		return nil
	}
	st.h = nil
	st.mu.Unlock()
	h.beginRelease()
	code, err := q.releaseRedisAfter(ctx, owner, h.token, c.tagsBefore(h))
	ended := h.end(errReleased, false)
	c.putMutex(key, st) // the hold's reference
	if err == nil && (code == 0 || !ended) {
		err = ErrNotHeld
	}
	err = wrapErr(q.info.Kind, q.info.Name, err)
	q.observeRelease(ctx, h, err, true)
	return err
}

func (q *qlock) observeRelease(ctx context.Context, h *hold, err error, complete bool) {
	if f := q.c.cfg.observer.Released; f != nil {
		f(ctx, Released{Lock: *h.lock, Hold: h.id, Held: h.held(), Err: err, Complete: complete})
	}
}

// releaseRedis runs the release script (token 0: any hold of owner) under a
// context that ignores ctx's cancellation; a lost reply is retried as every
// release is (idempotent) where the script makes that safe.
func (q *qlock) releaseRedis(ctx context.Context, owner string, token uint64) (int64, error) {
	return q.releaseRedisAfter(ctx, owner, token, nil)
}

// releaseRedisAfter is releaseRedis with the hold-tag changes pre (if not
// nil: Client.tagsBefore) sent ahead of it in its pipeline.
func (q *qlock) releaseRedisAfter(ctx context.Context, owner string, token uint64, pre *tagBatch) (int64, error) {
	x := q.p.release(owner, token)
	var code int64
	call := func(ctx context.Context) (err error) {
		code, err = q.c.execAfter(ctx, &pre, x.Script, x.Keys, x.Args).AsInt64()
		return err
	}
	defer func() { q.c.finishTags(pre) }()
	if token != 0 && q.p.retryRelease() {
		err := idempotent(ctx, call)
		return code, err
	}
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	err := call(cctx)
	return code, err
}

// releaseName names the call that releases q by lock context.
func (q *qlock) releaseName() string {
	if q.rwRead != "" {
		return "RUnlockContext"
	}
	if q.info.Kind == KindElection {
		return "Resign"
	}
	return "UnlockContext"
}

// acquireName names the call whose lock context a release of q takes.
func (q *qlock) acquireName() string {
	if q.rwRead != "" {
		return "RLockContext"
	}
	return "LockContext"
}
