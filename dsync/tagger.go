package dsync

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// Who blocked whom (Observer.HoldTag): a Client whose observer tags holds
// has a tagger, which keeps every tagged hold's tag and start, and, when a
// tagged hold ends (release, handoff inside the Client, loss), records
// (tag, start, end):
//
//   - in memory, per lock, while goroutines of this Client wait for it
//     (tagLock.ended), for them;
//   - in Redis, in the lock's history "<key>:taghist" (a list of at most
//     maxHistory entries, each kept histLife at most), beside the tags of
//     the current holders "<key>:tags", for the waiters of every other
//     Client, in any process.
//
// The changes for Redis are queued and sent together, one script per lock
// (tag_sync.lua), by a cleanup (send) that starts tagDelay after the
// first, so that a hold that ends within it costs one history entry and
// no tag; and before a hold of this Client is released in Redis (release),
// so that the waiter the release lets in finds every hold it waited
// behind. When a wait ends, the waiter collects the holds that held the
// lock during it (collect): its Client's own, and, if holds of other
// Clients can have held it meanwhile (this Client found the lock held in
// Redis during the wait), those Redis has, read in one round trip (or
// from the last read, for a Mutex held by this Client since that read).
//
// Times are the wall clocks of the Clients that record them, in µs
// (wallUS): exact between the Clients of one machine, as close as the
// machines' clocks are between machines.
type tagger struct {
	c *Client
	// sendMu: one send at a time, taking the queue under it, so the
	// changes of a lock reach Redis in the order they were made.
	sendMu sync.Mutex
	// mu guards the rest, and the fields of every blockNote after its
	// start. It is taken under mutexState.mu (blockedBy, a hold's end in
	// a local handoff), never the other way, and nothing is taken under
	// it.
	mu       sync.Mutex
	locks    map[string]*tagLock // by lock key
	ops      []tagOp             // changes not sent yet, in order
	flushing bool                // a send is due (started by kick)
	// flushFn is send as a cleanup, made once; wake cuts its wait short.
	flushFn func(context.Context)
	wake    chan struct{}
}

// tagLock is what the tagger knows of one lock: it exists while this
// Client has tagged holds of it or waits for it.
type tagLock struct {
	live    []*hold    // tagged holds not ended
	waits   int        // waits of this Client that had to wait (blockNote.key)
	foreign int        // of which found the lock held in Redis
	ended   []blockRec // holds ended while waits > 0, in the order they ended
	// foreignTo is when the last foreign wait ended (wall µs).
	foreignTo int64
	// gen counts the holds of this Client that ended other than by a
	// handoff inside the Client (the lock may have gone to another
	// Client); remote is the last read of Redis by a Mutex wait that got
	// the lock, valid while gen is still remoteGen (the lock has been
	// this Client's since).
	gen       uint64
	remote    []blockRec
	remoteGen uint64
}

// blockRec is a hold as the tagger records it: its tag, and its start and
// end in wall µs (end 0: not ended).
type blockRec struct {
	tag        string
	start, end int64
}

// holdTag is a tagged hold's tag, its start (wall µs) and the value Redis
// keeps for it, "<start µs> <tag>".
type holdTag struct {
	tag   string
	val   string
	start int64
	// endQueued: the hold's end was queued for Redis ahead of its release
	// (tagger.release); its end (tagger.ended) then queues nothing more.
	// Guarded by tagger.mu.
	endQueued bool
}

// tagOp is one change queued for Redis: a tagged hold began (set) or
// ended (end; unsent: its set was never sent, so Redis has no tag of it
// to remove, only the history entry to add).
type tagOp struct {
	key, owner string
	kind       string // opSet, opEnd or opEndUnsent (tag_sync.lua's)
	life       string // a set's lifetime of the tag in ms
	val        string // set: "<start> <tag>"; end: "<end> <start> <tag>"
	h          *hold  // a set's hold, so its end can drop it while unsent
}

// The kinds of tagOp, as tag_sync.lua reads them.
const (
	opSet       = "s"
	opEnd       = "e"
	opEndUnsent = "E"
)

const (
	// MaxBlockers bounds the blockers one acquisition reports
	// (AcquireDone.Blockers): beyond it, those that held the lock for the
	// least of the wait are dropped (AcquireDone.BlockersDropped). It is
	// the OpenTelemetry SDK's default limit of links per span; a wait
	// behind many short holds (the bench's cross-process scenario) goes
	// past 64.
	MaxBlockers = 128
	// maxLocalHist bounds the ended holds a tagLock keeps for its waits.
	maxLocalHist = 256
	// maxHistory and histLife bound a lock's history in Redis: the entries
	// kept (as many as a wait can report), and how long after its end a
	// hold is kept.
	maxHistory = 128
	histLife   = time.Minute
	// tagDelay is how long queued changes wait for others to join them.
	tagDelay = time.Millisecond
)

var epochUS = epoch.UnixMicro()

// wallUS is t on the wall clock in µs, through the monotonic clock since
// epoch (so the times one process records are consistent).
func wallUS(t time.Time) int64 { return epochUS + int64(t.Sub(epoch)/time.Microsecond) }

// startUS is when h began, in wall µs.
func (h *hold) startUS() int64 { return epochUS + h.start/int64(time.Microsecond) }

func newTagger(c *Client) *tagger {
	t := &tagger{c: c, locks: map[string]*tagLock{}, wake: make(chan struct{}, 1)}
	t.flushFn = t.flush
	return t
}

// lockLocked returns the tagLock of key, made if needed. t.mu must be held.
func (t *tagger) lockLocked(key string) *tagLock {
	tl := t.locks[key]
	if tl == nil {
		tl = &tagLock{}
		t.locks[key] = tl
	}
	return tl
}

// dropIdleLocked forgets the tagLock of key if nothing of it is left.
func (t *tagger) dropIdleLocked(key string, tl *tagLock) {
	if len(tl.live) == 0 && tl.waits == 0 && tl.foreign == 0 {
		delete(t.locks, key)
	}
}

// waiting notes that the acquisition n waits for the lock with key: in
// Redis (foreign), or in this Client's queue.
func (t *tagger) waiting(n *blockNote, key string, foreign bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n.key != "" && n.key != key {
		return
	}
	tl := t.lockLocked(key)
	if n.key == "" {
		n.key, n.gen = key, tl.gen
		tl.waits++
	}
	if foreign && !n.foreign {
		n.foreign = true
		tl.foreign++
	}
}

// tag records tag as hold h's, and queues it for Redis.
func (t *tagger) tag(h *hold, tag string) {
	start := h.startUS()
	ht := &holdTag{tag: tag, val: strconv.FormatInt(start, 10) + " " + tag, start: start}
	h.tag.Store(ht)
	t.mu.Lock()
	tl := t.lockLocked(h.key)
	tl.live = append(tl.live, h)
	t.ops = append(t.ops, tagOp{key: h.key, owner: h.rOwner, kind: opSet, life: leaseMS(t.c.tagLife(h)), val: ht.val, h: h})
	kick := t.kickLocked()
	t.mu.Unlock()
	if kick {
		t.kick()
	}
	if h.isEnded() {
		// Ended while being tagged (its end found no tag yet).
		t.ended(h)
	}
}

// ended records the end of hold h's tag, now, and queues it for Redis.
func (t *tagger) ended(h *hold) {
	ht := h.tag.Swap(nil)
	if ht == nil {
		return
	}
	h.mu.Lock()
	// Handed on inside the Client (without a round trip, or by a handoff
	// script to a waiter of its own): the lock stays here, so no hold of
	// another Client can have held it since.
	local := h.succ != nil || h.kept
	h.mu.Unlock()
	t.endAt(h, ht, wallUS(time.Now()), local)
}

// endAt records the end of h (tag ht) at end (wall µs); local: it was
// handed on inside the Client.
func (t *tagger) endAt(h *hold, ht *holdTag, end int64, local bool) {
	t.mu.Lock()
	if tl := t.locks[h.key]; tl != nil {
		if i := slices.Index(tl.live, h); i >= 0 {
			tl.live = slices.Delete(tl.live, i, i+1)
		}
		if !local {
			tl.gen++
		}
		if tl.waits > 0 {
			if len(tl.ended) >= maxLocalHist {
				tl.ended = slices.Delete(tl.ended, 0, len(tl.ended)-maxLocalHist+1)
			}
			tl.ended = append(tl.ended, blockRec{tag: ht.tag, start: ht.start, end: end})
		}
		t.dropIdleLocked(h.key, tl)
	}
	kick := false
	if !ht.endQueued {
		// (Else queued already, ahead of the release: tagger.release.)
		kick = t.queueEndLocked(h, ht, end)
	}
	t.mu.Unlock()
	if kick {
		t.kick()
	}
	if !local {
		// The lock may be another Client's now: its waiters find the
		// hold ended the sooner the better (until then they take it
		// for current).
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// queueEndLocked queues the end of h (tag ht) at end (wall µs; 0:
// Redis's clock when the batch runs there) for Redis, and reports whether
// a send must be started (kick). t.mu must be held.
func (t *tagger) queueEndLocked(h *hold, ht *holdTag, end int64) bool {
	// A tag not sent yet need not be: the entry says it all, and there is
	// no tag of it in Redis to remove.
	kind := opEnd
	for i := len(t.ops) - 1; i >= 0; i-- {
		if t.ops[i].h == h {
			t.ops = slices.Delete(t.ops, i, i+1)
			kind = opEndUnsent
			break
		}
	}
	ht.endQueued = true
	t.ops = append(t.ops, tagOp{key: h.key, owner: h.rOwner, kind: kind, val: strconv.FormatInt(end, 10) + " " + ht.val})
	return t.kickLocked()
}

// kickLocked reports whether a send must be started for the queue.
func (t *tagger) kickLocked() bool {
	if t.flushing {
		return false
	}
	t.flushing = true
	return true
}

// kick starts the send of the queue as a cleanup, so that Close waits for
// it; once Close has drained the cleanups, what is queued is dropped
// (every hold has ended by then: see Client.Close).
func (t *tagger) kick() {
	if !t.c.background(t.flushFn) {
		t.mu.Lock()
		t.flushing = false
		t.ops = nil
		t.mu.Unlock()
	}
}

// flush sends the queue, tagDelay after it was started, until it is
// empty, each send tagDelay after the one before (under steady contention
// the queue refills at once: the changes of a millisecond go together, not
// one script per round trip); a hold of this Client that ended other than
// inside it (wake) or Close cuts the wait short. Each send has a cleanup
// budget of its own, since under steady contention the queue can refill
// for longer than one budget.
func (t *tagger) flush(context.Context) {
	timer := time.NewTimer(tagDelay)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-t.wake:
		case <-t.c.done:
		}
		ctx, cancel := context.WithTimeout(t.c.cleanCtx, cleanupTimeout)
		more := t.send(ctx, true)
		cancel()
		if !more {
			return
		}
		timer.Reset(tagDelay)
	}
}

// send sends the queued changes, one script per lock, and reports whether
// there were any; with last, an empty queue ends the flush.
func (t *tagger) send(ctx context.Context, last bool) bool {
	b := t.take(nil, last)
	if b == nil {
		return false
	}
	b.send(ctx)
	return true
}

// tagBatch is the queued changes taken for one send, as the scripts that
// apply them (execs). It holds tagger.sendMu from take until done, so that
// the changes of a lock reach Redis in the order they were made.
type tagBatch struct {
	t     *tagger
	execs []rueidis.LuaExec
}

// take takes the queued changes, with the end of h (if not nil, tagged
// and its end not queued yet) queued too, at Redis's clock when the batch
// runs there, and returns them as a batch to send, or nil if there are
// none; with last, an empty queue ends the flush.
func (t *tagger) take(h *hold, last bool) *tagBatch {
	t.sendMu.Lock()
	t.mu.Lock()
	if h != nil {
		// Its end is Redis's clock when the batch runs there (end 0, see
		// tag_sync.lua): right before its release, in the same pipeline.
		if ht := h.tag.Load(); ht != nil && !ht.endQueued && t.queueEndLocked(h, ht, 0) {
			// No send was due: the queue is taken now.
			t.flushing = false
		}
	}
	ops := t.ops
	t.ops = nil
	if len(ops) == 0 {
		if last {
			t.flushing = false
		}
		t.mu.Unlock()
		t.sendMu.Unlock()
		return nil
	}
	t.mu.Unlock()
	c := t.c
	now := strconv.FormatInt(wallUS(time.Now()), 10)
	var execs []rueidis.LuaExec
	at := map[string]int{}
	for _, op := range ops {
		i, ok := at[op.key]
		if !ok {
			i = len(execs)
			at[op.key] = i
			execs = append(execs, scripts.TagSyncCall(tagKey(op.key), histKey(op.key), c.args.lease, histLifeArg, maxHistoryArg, now).LuaExec)
		}
		execs[i].Args = scripts.AppendTagSyncChange(execs[i].Args, op.kind, op.owner, op.life, op.val)
	}
	return &tagBatch{t: t, execs: execs}
}

// send sends b, and is done with it.
func (b *tagBatch) send(ctx context.Context) {
	b.t.c.evalMulti(ctx, scripts.TagSync, b.execs)
	b.done()
}

// cmds returns b's scripts as EVALSHA commands, for a caller that sends
// them in its own pipeline (Client.execAfter) and then calls done.
func (b *tagBatch) cmds() rueidis.Commands {
	c := b.t.c
	return c.evalCmds(scripts.TagSync, b.execs)
}

// done ends b's send.
func (b *tagBatch) done() { b.t.sendMu.Unlock() }

var (
	histLifeArg   = leaseMS(histLife)
	maxHistoryArg = strconv.Itoa(maxHistory)
)

// release takes the queue for Redis ahead of the release of h there (see
// Client.beforeRelease): the ends of the holds before h and, with end,
// h's own end, so that a waiter of another Client that the release lets
// in finds them all in the lock's history. The caller sends the batch
// before the release, in the same pipeline (Client.execAfter), or on its
// own just before it (tagBatch.send). Without end, h (if tagged) goes as
// it is (its tag, if not sent yet), its end queued when it ends.
//
// h's end is Redis's clock when the batch runs there, right before the
// release in the same pipeline, not the Client's when it was sent: the
// entry ends when the lock was let go in Redis, not a round trip early.
// (A release retried after a lost reply still ends its entry where its
// first batch ran.)
func (t *tagger) release(h *hold, end bool) *tagBatch {
	t.mu.Lock()
	empty := len(t.ops) == 0
	t.mu.Unlock()
	var eh *hold
	if h != nil && h.tag.Load() != nil {
		empty = false
		if end {
			eh = h
		}
	}
	if empty {
		return nil
	}
	return t.take(eh, false)
}

// tagKey is the hash of the tags of a lock's current holders, by owner in
// Redis: "<expiry ms> <start µs> <tag>".
func tagKey(key string) string { return key + ":tags" }

// histKey is the list of a lock's ended holds, newest first: "<end µs>
// <start µs> <tag>".
func histKey(key string) string { return key + ":taghist" }

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

// renewTags renews the tags of the tagged holds among holds (a renewal
// round's), pipelined; a tag found gone stays gone (one not sent yet is
// written with a fresh lifetime when it is).
func (c *Client) renewTags(ctx context.Context, holds []*hold) {
	var execs []rueidis.LuaExec
	for _, h := range holds {
		if t := h.tag.Load(); t != nil && !h.isEnded() {
			execs = append(execs, scripts.TagSetCall(tagKey(h.key), h.rOwner, t.val, c.args.lease, true).LuaExec)
		}
	}
	if len(execs) > 0 {
		c.evalMulti(ctx, scripts.TagSet, execs)
	}
}

// collect returns the holds that held the lock while the acquisition n
// waited, in the order they began, and ends n's wait (acquired: it got the
// lock, of kind). See Blocker.
//
// A wait that ended without the lock (its context, Close, an error) waits
// for that read no longer than within (as a cleanup on its way out does,
// cleanupNow: its deadline, or now, plus cleanupGrace): rueidis can hold
// a call behind another call's dial whatever its context, and the wait
// must return by its own. Past it, the read goes on in the background
// (Close waits for it) and the blockers Redis would have added are
// missing. within < 0: no bound (an acquisition that got the lock).
func (t *tagger) collect(n *blockNote, kind Kind, acquired bool, within time.Duration) ([]Blocker, int) {
	end := time.Now()
	ws, we := wallUS(n.start), wallUS(end)
	t.mu.Lock()
	key := n.key
	tl := t.locks[key]
	if key == "" || tl == nil {
		t.mu.Unlock()
		return nil, 0
	}
	first := len(tl.ended)
	for first > 0 && tl.ended[first-1].end > ws {
		first--
	}
	recs := make([]blockRec, 0, len(tl.ended)-first+len(tl.live))
	recs = append(recs, tl.ended[first:]...)
	for _, h := range tl.live {
		if ht := h.tag.Load(); ht != nil {
			recs = append(recs, blockRec{tag: ht.tag, start: ht.start})
		}
	}
	own := 0
	if n.foreign {
		own = 1
	}
	// Holds of other Clients may have overlapped the wait if it, or a
	// goroutine of this Client meanwhile, found the lock held in Redis, or
	// if a hold of this Client ended other than by a handoff inside it
	// (the lock may have gone to another Client in between).
	remote := n.foreign || tl.foreign > own || tl.foreignTo >= ws || tl.gen != n.gen
	var cached []blockRec
	if remote && kind == KindMutex && tl.remote != nil && tl.remoteGen == tl.gen {
		cached, remote = tl.remote, false
	}
	gen := tl.gen
	tl.waits--
	if n.foreign {
		tl.foreign--
		tl.foreignTo = we
	}
	n.key = ""
	if tl.waits == 0 {
		tl.ended = nil
	}
	t.dropIdleLocked(key, tl)
	t.mu.Unlock()
	if remote {
		cached = t.readWithin(key, within)
		if kind == KindMutex && acquired {
			// Kept only by the tagLock whose count gen is: if it was
			// dropped meanwhile, a new one counts from 0 again, and could
			// reach gen with holds ended since the read.
			t.mu.Lock()
			if t.locks[key] == tl {
				tl.remote, tl.remoteGen = cached, gen
			}
			t.mu.Unlock()
		}
	}
	return blockers(ws, we, recs, cached)
}

// readWithin is read, given up after d (d < 0: never; see collect).
func (t *tagger) readWithin(key string, d time.Duration) []blockRec {
	if d < 0 {
		return t.read(key)
	}
	if d == 0 {
		return nil
	}
	ch := make(chan []blockRec, 1)
	if !t.c.spawn(nil, func() { ch <- t.read(key) }) {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case recs := <-ch:
		return recs
	case <-tm.C:
		return nil
	}
}

// read returns the holds Redis has of the lock with key: its current
// holders' tags (end 0) and its history.
func (t *tagger) read(key string) []blockRec {
	c := t.c
	ctx, cancel := context.WithTimeout(c.ctx, cleanupTimeout)
	defer cancel()
	rs := c.rc.DoMulti(ctx,
		c.rc.B().Hgetall().Key(tagKey(key)).Build(),
		c.rc.B().Lrange().Key(histKey(key)).Start(0).Stop(-1).Build())
	var out []blockRec
	nowMS := time.Now().UnixMilli()
	if tags, err := rs[0].AsStrMap(); err == nil {
		for _, v := range tags {
			// "<expiry ms> <start µs> <tag>"
			f := strings.SplitN(v, " ", 3)
			if len(f) != 3 {
				continue
			}
			exp, err1 := strconv.ParseInt(f[0], 10, 64)
			start, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 == nil && err2 == nil && exp > nowMS {
				out = append(out, blockRec{tag: f[2], start: start})
			}
		}
	}
	if hist, err := rs[1].AsStrSlice(); err == nil {
		for _, v := range hist {
			// "<end µs> <start µs> <tag>"
			f := strings.SplitN(v, " ", 3)
			if len(f) != 3 {
				continue
			}
			end, err1 := strconv.ParseInt(f[0], 10, 64)
			start, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 == nil && err2 == nil {
				out = append(out, blockRec{tag: f[2], start: start, end: end})
			}
		}
	}
	return out
}

// overlap is how long (µs) r held the lock during a wait from ws to we;
// <= 0: not during it.
func (r blockRec) overlap(ws, we int64) int64 {
	e := we
	if r.end != 0 {
		e = min(r.end, we)
	}
	return e - max(r.start, ws)
}

// blockers makes the Blockers of a wait from ws to we (wall µs) of the
// holds in local (this Client's, first: their times are exact) and
// remote (Redis's), each hold once (by its tag; an ended record before a
// current one), those that overlapped the wait, in the order they began,
// at most MaxBlockers (the rest, those that overlapped least, counted as
// dropped).
func blockers(ws, we int64, local, remote []blockRec) ([]Blocker, int) {
	// Of Redis's, only those that can count: those that overlapped the
	// wait (most of a read, or of the last one, cached: collect, are the
	// history's older entries), and the ended records of the holds that a
	// record has as current (which the ended record overrides, below).
	var cur []string
	for _, r := range local {
		if r.end == 0 {
			cur = append(cur, r.tag)
		}
	}
	n := 0
	for _, r := range remote {
		if r.overlap(ws, we) > 0 {
			n++
			if r.end == 0 {
				cur = append(cur, r.tag)
			}
		}
	}
	counts := func(r blockRec) bool {
		return r.overlap(ws, we) > 0 || (r.end != 0 && slices.Contains(cur, r.tag))
	}
	if len(cur) > 0 {
		n = 0
		for _, r := range remote {
			if counts(r) {
				n++
			}
		}
	}
	if len(local)+n == 0 {
		return nil, 0
	}
	recs := local
	if n > 0 {
		all := make([]blockRec, 0, len(local)+n)
		all = append(all, local...)
		for _, r := range remote {
			if counts(r) {
				all = append(all, r)
			}
		}
		// The same hold may be in both, or in Redis twice (current, then
		// ended): keep one, an ended record before a current one.
		byTag := make(map[string]blockRec, len(all))
		for _, r := range all {
			if o, ok := byTag[r.tag]; ok && (o.end != 0 || r.end == 0) {
				continue
			}
			byTag[r.tag] = r
		}
		recs = make([]blockRec, 0, len(byTag))
		for _, r := range byTag {
			recs = append(recs, r)
		}
	}
	// (This Client's own records are each of one hold: a hold leaves
	// tagLock.live as it enters tagLock.ended.)
	out := make([]Blocker, 0, len(recs))
	for _, r := range recs {
		o := r.overlap(ws, we)
		if o <= 0 {
			continue
		}
		b := Blocker{Tag: r.tag, Start: time.UnixMicro(r.start), Overlap: time.Duration(o) * time.Microsecond}
		if r.end != 0 {
			b.End = time.UnixMicro(r.end)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, 0
	}
	dropped := 0
	if len(out) > MaxBlockers {
		slices.SortFunc(out, func(a, b Blocker) int { return int(b.Overlap - a.Overlap) })
		dropped = len(out) - MaxBlockers
		out = out[:MaxBlockers]
	}
	slices.SortFunc(out, func(a, b Blocker) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Tag, b.Tag)
	})
	return out, dropped
}
