package dsync

import (
	"context"
	"time"
)

// observation is one acquisition seen through the Client's Observer: the
// AcquireStart and AcquireDone hooks around it and, when the observer tags
// holds (Observer.HoldTag), the holds it waited behind (see tagger) and
// its own hold's tag. Every primitive's acquisition goes through it.
type observation struct {
	c     *Client
	info  Lock
	owner string
	try   bool
	// queued: it waited in its Client's queue (AcquireDone.Queued; set by
	// the caller before done).
	queued bool
	// granted: a release in Redis granted it the lock (AcquireDone.Granted;
	// set by the caller before done).
	granted bool
	octx    context.Context
	start   time.Time
	note    *blockNote
}

// observe starts an acquisition of info by owner. The context it returns
// carries the note of its wait when the observer tags holds; the
// acquisition must run under it (see Client.blocked).
func (c *Client) observe(ctx context.Context, info Lock, owner string, try bool) (context.Context, observation) {
	o := observation{c: c, info: info, owner: owner, try: try, octx: ctx}
	obs := &c.cfg.observer
	if obs.AcquireStart != nil {
		if x := obs.AcquireStart(ctx, AcquireStart{Lock: info, Try: try}); x != nil {
			o.octx = x
		}
	}
	o.start = time.Now()
	if c.tags != nil && !try {
		o.note = &blockNote{start: o.start}
		ctx = context.WithValue(ctx, blockKey{}, o.note)
	}
	return ctx, o
}

// done reports the end of the acquisition, with the holds it waited
// behind, and tags the new hold h (if any) for the waiters it will block.
func (o *observation) done(h *hold, reentered bool, attempts int, err error) {
	obs := &o.c.cfg.observer
	if obs.AcquireDone == nil && obs.HoldTag == nil {
		return
	}
	e := AcquireDone{Lock: o.info, Owner: o.owner, Try: o.try, Acquired: h != nil, Reentered: reentered,
		Err: err, Wait: time.Since(o.start), Attempts: attempts, Queued: o.queued, Granted: o.granted}
	if h != nil {
		e.Token, e.Hold, e.HeldSince = h.token, h.id, h.since()
	}
	if o.note != nil {
		within := time.Duration(-1)
		if h == nil {
			// Not acquired: the read of the blockers is a cleanup on the
			// wait's way out, bounded as one (cleanupNow).
			within = cleanupGrace
			if dl, ok := o.octx.Deadline(); ok {
				within = max(min(within, time.Until(dl)+cleanupGrace), 0)
			}
		}
		e.Blockers, e.BlockersDropped = o.c.tags.collect(o.note, o.info.Kind, h != nil, within)
		if len(e.Blockers) > 0 {
			e.BlockedBy = make([]string, len(e.Blockers))
			for i, b := range e.Blockers {
				e.BlockedBy[i] = b.Tag
			}
		}
	}
	if obs.AcquireDone != nil {
		obs.AcquireDone(o.octx, e)
	}
	if h != nil && !reentered && obs.HoldTag != nil {
		if tag := obs.HoldTag(o.octx, e); tag != "" && len(tag) <= maxTagLen {
			o.c.tags.tag(h, tag)
		}
	}
}

// maxTagLen bounds a hold tag; a longer one is not stored.
const maxTagLen = 512

// blockNote is one acquisition's wait, as the tagger knows it: when it
// began, and, once it had to wait, the lock's key (it is then counted in
// the lock's tagLock.waits) and whether it found the lock held in Redis
// (foreign: holds of other Clients may then have blocked it). Its fields
// after start are guarded by tagger.mu.
type blockNote struct {
	start   time.Time
	key     string
	foreign bool
	gen     uint64 // the lock's tagLock.gen when the wait began to count
}

type blockKey struct{}

// blocked notes that an acquisition under ctx found the lock with key
// held in Redis (an attempt failed: it waits for holders of any Client).
// It costs nothing unless the observer tags holds.
func (c *Client) blocked(ctx context.Context, _ Lock, key string) {
	if c.tags == nil {
		return
	}
	if n, _ := ctx.Value(blockKey{}).(*blockNote); n != nil {
		c.tags.waiting(n, key, true)
	}
}

// blockedBy notes that an acquisition under ctx queued in this Client
// for the Mutex with key (behind a holder or an acquisition of its own
// Client).
func (c *Client) blockedBy(ctx context.Context, key string) {
	if c.tags == nil {
		return
	}
	if n, _ := ctx.Value(blockKey{}).(*blockNote); n != nil {
		c.tags.waiting(n, key, false)
	}
}

// untag ends the tag of hold h, which has ended (see tagger.ended).
func (c *Client) untag(h *hold) {
	if c.tags != nil {
		c.tags.ended(h)
	}
}

// beforeRelease sends, ahead of the release of hold h in Redis, the
// tag changes this Client has queued: a waiter that the release lets in
// then finds every hold it waited behind in Redis. h's end is queued when
// it ends (a Semaphore's release may leave its hold in place).
func (c *Client) beforeRelease(h *hold) {
	if c.tags != nil {
		if b := c.tags.release(h, false); b != nil {
			ctx, cancel := context.WithTimeout(c.cleanCtx, cleanupTimeout)
			b.send(ctx)
			cancel()
		}
	}
}

// tagsBefore returns, for a release of hold h in Redis that ends it (a
// Mutex's, a FairMutex's or an RWMutex's), the tag changes this Client has
// queued, h's end among them, to send in the release's pipeline ahead of
// it (Client.execAfter): a waiter that the release lets in then finds
// every hold it waited behind in Redis. nil: none (no observer tags
// holds, or nothing is queued).
func (c *Client) tagsBefore(h *hold) *tagBatch {
	if c.tags == nil {
		return nil
	}
	return c.tags.release(h, true)
}
