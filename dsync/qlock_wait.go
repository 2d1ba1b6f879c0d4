package dsync

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// wait calls step in the wait loop (waitLoop) until the lock is held
// (r.held()), ctx is done or Redis fails; the waiter is woken on its
// channel, and the fallback is the script's hint: a queued waiter's
// attempts also renew its place, which lasts one lease. A wait that ends
// without the lock leaves the queue at once.
func (q *qlock) wait(ctx context.Context, owner string, try bool) (r acqReply, sentAt time.Time, attempts int, err error) {
	c := q.c
	a := qAttempt{q: q, ctx: ctx, owner: owner, try: try}
	defer func() {
		if !r.held() && a.queued {
			wid := a.wid
			// At once, so later waiters lose no time, within a budget so
			// that the call returns by its context's end even when Redis is
			// slow or cut off (then again in the background; the place
			// lapses within a lease anyway).
			c.cleanupNow(ctx, func(ctx context.Context) error { return q.p.leave(ctx, owner, wid) }, func(err error) {
				c.cfg.logger.Warn("dsync: leaving the queue failed", "kind", q.info.Kind, "name", shortName(q.info.Name), "err", err)
			})
		}
	}()
	// An owner the caller supplied may hold the lock through another Client
	// too: an attempt marker lets a lost reply be undone exactly.
	// An owner made for this call holds nothing else: its undo marks the
	// attempt undone, so an acquire arriving later does nothing, and
	// releases what the owner holds; the acquire only checks the mark.
	a.fresh = freshOwner(ctx)
	a.marker = q.base + ":x:" + owner
	if !a.fresh {
		a.marker = q.base + ":a:" + c.attemptID()
	}
	id := strconv.FormatUint(c.attemptSeq.Add(1), 36)
	a.wid = c.id[:16] + "." + id
	attempts, err = waitLoop(c, ctx, q.p.channel(), id, try, qWait{&a})
	if err != nil || a.r.code == acqWaiting {
		return acqReply{}, a.sentAt, attempts, err
	}
	if !a.fresh {
		c.dropMarker(a.marker)
	}
	return a.r, a.sentAt, attempts, nil
}

// qAttempt is the state of one FairMutex or RWMutex acquisition in Redis.
type qAttempt struct {
	q          *qlock
	ctx        context.Context
	owner      string
	try, fresh bool
	marker     string
	wid        string    // the wait's name in the queue
	r          acqReply  // the last attempt's reply (a grant: {3, token})
	sentAt     time.Time // when it was sent (a grant: when its lease clock starts)
	srvAt      uint64    // the server time of a waiting reply, in µs (0: unknown)
	queued     bool      // an attempt may have queued the owner
}

// qWait is a qlock acquisition's waitProto.
type qWait struct{ a *qAttempt }

func (w qWait) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	a := w.a
	a.sentAt = time.Now()
	q, sa := a.q, stepArgs{owner: a.owner, wid: a.wid, try: a.try, marker: a.marker, check: a.fresh}
	v, err := bounded(q.c, ctx, func(ctx context.Context) ([]int64, error) {
		return q.p.step(ctx, &q.lc, sa)
	})
	var ok bool
	a.r, ok = decodeAcq(v)
	if err == nil && !ok {
		err = errors.New("dsync: unexpected reply from the acquire script")
	}
	if err != nil || a.r.code != acqWaiting {
		return true, 0, err
	}
	a.srvAt = a.r.srvAt()
	return false, a.r.hint(), nil
}

func (w qWait) failed(err error) {
	a, q := w.a, w.a.q
	if isRedisErr(err) {
		return
	}
	// The script may have run with its reply lost, or acquired without
	// the replicas' acknowledgement: undo it.
	a.queued = a.queued || !a.try
	notSynced := errors.Is(err, ErrNotReplicated)
	owner, wid, marker, r := a.owner, a.wid, a.marker, a.r
	switch {
	case notSynced && (r.code == acqAcquired || r.code == acqGranted):
		// Applied, so the marker is "1": released by the token, it goes
		// too (the exact undo it is for is not needed).
		_, _ = q.releaseRedis(a.ctx, owner, r.token())
		if !a.fresh {
			q.c.dropMarker(marker)
		}
	case notSynced:
		q.undoAttempt(a.ctx, q.p.undo(owner, marker, a.fresh))
	default:
		// Exact, so it can run in the background: the call returns by its
		// deadline even if the caller acquires again at once. Once the
		// attempt is marked undone no late acquire can queue the owner, so
		// leaving the queue again after it is final.
		queues, undo := !a.try, q.p.undo(owner, marker, a.fresh)
		q.c.background(func(bctx context.Context) {
			q.undoAttempt(bctx, undo)
			if queues {
				_ = q.p.leave(bctx, owner, wid)
			}
		})
	}
}

func (w qWait) waiting() {
	a := w.a
	a.queued = true
	a.q.c.blocked(a.ctx, a.q.info, a.q.base)
}

func (qWait) gaveUp() {} // leaving the queue is wait's

// granted ends the wait with the lock a release granted it, as the reply
// of an attempt that found the grant would have; its lease clock starts
// at the grant (grantStart). A grant with less than half its lease left
// by now is claimed again by the next attempt instead (grantLive).
func (w qWait) granted(tok, at uint64) bool {
	a := w.a
	start, live := grantClock(a.sentAt, a.srvAt, at, a.q.lease())
	if !live {
		return false
	}
	a.r = acqReply{code: acqGranted, value: int64(tok)}
	a.sentAt = start
	return true
}

// undoAttempt releases what an attempt acquired, if its script ran, and
// nothing otherwise, with undo (q.p.undo's call for its owner and marker).
// It can be repeated.
func (q *qlock) undoAttempt(ctx context.Context, undo scripts.Call) {
	_ = idempotent(ctx, func(ctx context.Context) error {
		return q.c.run(ctx, undo).Error()
	})
}
