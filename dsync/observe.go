package dsync

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// observation is one acquisition seen through the Client's Observer: the
// AcquireStart and AcquireDone hooks around it and, when the observer tags
// holds (Observer.HoldTag), the holders it waited for and its own hold's
// tag. Every primitive's acquisition goes through it.
type observation struct {
	c     *Client
	info  Lock
	owner string
	try   bool
	octx  context.Context
	start time.Time
	note  *blockNote
}

// observe starts an acquisition of info by owner. The context it returns
// carries the note of blockers when the observer tags holds; the
// acquisition must run under it (see Client.blocked).
func (c *Client) observe(ctx context.Context, info Lock, owner string, try bool) (context.Context, observation) {
	o := observation{c: c, info: info, owner: owner, try: try, octx: ctx}
	obs := &c.cfg.observer
	if obs.AcquireStart != nil {
		if x := obs.AcquireStart(ctx, AcquireStart{Lock: info, Try: try}); x != nil {
			o.octx = x
		}
	}
	if obs.HoldTag != nil && !try {
		o.note = &blockNote{}
		ctx = context.WithValue(ctx, blockKey{}, o.note)
	}
	o.start = time.Now()
	return ctx, o
}

// done reports the end of the acquisition, and tags the new hold h (if
// any) for the waiters it will block.
func (o *observation) done(h *hold, reentered bool, attempts int, err error) {
	obs := &o.c.cfg.observer
	if obs.AcquireDone == nil && obs.HoldTag == nil {
		return
	}
	e := AcquireDone{Lock: o.info, Owner: o.owner, Try: o.try, Acquired: h != nil, Reentered: reentered,
		Err: err, Wait: time.Since(o.start), Attempts: attempts}
	if h != nil {
		e.Token, e.Hold = h.token, h.id
	}
	if o.note != nil {
		e.BlockedBy = o.note.list()
	}
	if obs.AcquireDone != nil {
		obs.AcquireDone(o.octx, e)
	}
	if h != nil && !reentered && obs.HoldTag != nil {
		if tag := obs.HoldTag(o.octx, e); tag != "" && len(tag) <= maxTagLen {
			o.c.tag(h, tag)
		}
	}
}

// maxTagLen bounds a hold tag; a longer one is not stored.
const maxTagLen = 512

// blockNote collects the tags of the holders one acquisition waited for.
type blockNote struct {
	mu    sync.Mutex
	asked bool // Redis was read once already
	tags  []string
}

type blockKey struct{}

func (n *blockNote) add(tag string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tags {
		if t == tag {
			return
		}
	}
	n.tags = append(n.tags, tag)
}

func (n *blockNote) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tags
}

// firstAsk reports whether this is the acquisition's first look at Redis.
func (n *blockNote) firstAsk() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	first := !n.asked
	n.asked = true
	return first
}

// tagKey is the hash of the tags of a lock's holders, by owner in Redis.
func tagKey(key string) string { return key + ":tags" }

// tag records tag as hold h's: in the hold, for local waiters, and with
// the lock in Redis (one script), for waiters in other processes. A tag
// lives in Redis as long as its hold: the release (or Close) removes it
// (untag); a watchdog hold's tag is written to live one lease and renewed
// with the hold (renewTags), a fixed-lease hold's lives until its lease
// ends; so a tag whose holder died is gone within one lease of its hold's
// end (tag_set.lua prunes it).
func (c *Client) tag(h *hold, tag string) {
	h.tag.Store(&tag)
	ctx, cancel := context.WithTimeout(c.ctx, cleanupTimeout)
	defer cancel()
	_ = c.lua(scripts.TagSet).Exec(ctx, c.rc, []string{tagKey(h.key)}, []string{h.rOwner, tag, leaseMS(c.tagLife(h)), "set"}).Error()
	if h.isEnded() {
		// Ended while the tag was written (its untag found no tag yet).
		c.untag(h)
	}
}

// tagLife is how long a write of h's tag lives: a lease for a watchdog
// hold (renewed with it), the rest of its lease for a fixed-lease one.
func (c *Client) tagLife(h *hold) time.Duration {
	if h.watchdog {
		return c.cfg.lease
	}
	h.mu.Lock()
	d := time.Until(h.deadline)
	h.mu.Unlock()
	return max(d+timerLateness, time.Millisecond)
}

// untag removes the ended hold h's tag from Redis, in the background (a
// cleanup, which runs while the Client closes too).
func (c *Client) untag(h *hold) {
	t := h.tag.Load()
	if t == nil {
		return
	}
	c.background(func(ctx context.Context) {
		_ = c.lua(scripts.TagClear).Exec(ctx, c.rc, []string{tagKey(h.key)}, []string{h.rOwner, *t}).Error()
	})
}

// renewTags renews the tags of the tagged holds among holds (a renewal
// round's), pipelined; a tag found gone stays gone.
func (c *Client) renewTags(ctx context.Context, holds []*hold) {
	var execs []rueidis.LuaExec
	for _, h := range holds {
		if t := h.tag.Load(); t != nil && !h.isEnded() {
			execs = append(execs, rueidis.LuaExec{Keys: []string{tagKey(h.key)}, Args: []string{h.rOwner, *t, c.args.lease, "renew"}})
		}
	}
	if len(execs) > 0 {
		c.lua(scripts.TagSet).ExecMulti(ctx, c.rc, execs...)
	}
}

// tagOf returns the tag in a tag hash value ("<expiry ms> <tag>", see
// tag_set.lua), or "" if it has expired.
func tagOf(v string, nowMS int64) string {
	sp := strings.IndexByte(v, ' ')
	if sp < 0 {
		return ""
	}
	exp, err := strconv.ParseInt(v[:sp], 10, 64)
	if err != nil || exp <= nowMS {
		return ""
	}
	return v[sp+1:]
}

// blocked notes, for an acquisition under ctx that found the lock held,
// the tags of the lock's holders (once per acquisition: the holders it
// first waited for). It costs nothing unless the observer tags holds.
func (c *Client) blocked(ctx context.Context, l Lock, key string) {
	if c.cfg.observer.HoldTag == nil {
		return
	}
	n, _ := ctx.Value(blockKey{}).(*blockNote)
	if n == nil || !n.firstAsk() {
		return
	}
	tags, err := c.rc.Do(ctx, c.rc.B().Hgetall().Key(tagKey(key)).Build()).AsStrMap()
	if err != nil || len(tags) == 0 {
		return
	}
	// Only the current holders' tags: a holder that died left its tag.
	states, err := c.Inspect(ctx, l.Name)
	if err != nil {
		return
	}
	for _, st := range states {
		if st.Kind != l.Kind {
			continue
		}
		for _, h := range st.Holders {
			if t := tagOf(tags[h.Owner], time.Now().UnixMilli()); t != "" {
				n.add(t)
			}
		}
	}
}

// blockedBy notes, for an acquisition under ctx that queues behind hold h
// of this Client, h's tag.
func (c *Client) blockedBy(ctx context.Context, h *hold) {
	if c.cfg.observer.HoldTag == nil || h == nil {
		return
	}
	n, _ := ctx.Value(blockKey{}).(*blockNote)
	if t := h.tag.Load(); n != nil && t != nil {
		n.add(*t)
	}
}
