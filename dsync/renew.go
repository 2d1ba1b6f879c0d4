package dsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// defaultRenewBatch bounds the holds renewed by one script call (tests
// change it per Client: testHooks.renewBatch).
const defaultRenewBatch = 256

// defaultRenewChunk bounds the holds of one pipeline of a renewal round: a round
// sends its script calls in pipelines of about this many holds, all at
// once, each pipeline's lease clocks moved from its own send time, so that
// a Client holding a million locks does not send one pipeline so long that
// it times out (measured: 8.5-9.4 s rounds, an i/o timeout and most locks
// lost at 1M). Tests change it per Client: testHooks.renewChunk.
const defaultRenewChunk = 16384

// The renewer is the Client's single watchdog: every lease/3 it renews all
// watchdog holds of the Client (those its clock watches), whatever their kind, and
// keeps the records of its Election terms (Client.terms), pipelined, in
// batch scripts per kind and cluster slot. No hold has a goroutine or
// timer of its own.
type renewer struct {
	c *Client
	// checks are holds to check in Redis now (see Client.forced), on the
	// loop's goroutine, which alone touches a hold's renewTag.
	checks chan holdCheck
	// now runs a round at once (tests: RenewRound), closing the channel
	// it sends when the round is done.
	now chan chan struct{}
	// lastFail is set while renewal rounds fail (nil after one that
	// succeeds), for the cause of a hold lost meanwhile (expiredCause).
	lastFail atomic.Pointer[renewFail]
	// sess is the Client's renewal session (session.go).
	sess session
	// flight, while not nil, is the session batches in flight (see
	// takeOff).
	flight atomic.Pointer[flight]
	// exited is closed when loop has returned (Close waits for it before
	// it releases the holds).
	exited chan struct{}
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, checks: make(chan holdCheck), now: make(chan chan struct{}), exited: make(chan struct{})}
}

// takeOff begins a flight of session batches (MutexRenewSession): until it
// has landed, a Mutex release of this Client waits for it
// (Mutex.afterRenewal) before it writes to Redis. A session batch binds a
// hold whose value has a count of 1 to the Client's session, and one sent
// before a release of a hold shared with another Client (a re-entry
// through it) but run after it would bind the other Client's hold, left
// with a count of 1, to this Client's session: the other Client, believing
// it unbound, would never keep the session alive, and would lose the lock
// when it lapsed, while its own rounds had said the hold was renewed. The
// batches run in Redis either before the release (the release waits for
// their replies) or without the hold (calls leaves out a hold being
// released: the check and the release's mark are under the hold's mu). A
// reply that never comes within the batch's own bound (lease/2: Redis
// stalled that long) ends the wait, and then the order is Redis's.
//
// The flight lands when the caller has called land once, after sending
// its pipelines, and each pipeline it counted (add) has had its replies
// (send), before they are applied: applying them may run the Observer's
// functions, which may release a lock of this Client.
func (r *renewer) takeOff() *flight {
	f := &flight{r: r, done: make(chan struct{})}
	f.left.Store(1)
	r.flight.Store(f)
	return f
}

// A flight is a renewal round's (or check's) session batches in flight:
// see renewer.takeOff. A nil flight is none (no session).
type flight struct {
	r    *renewer
	left atomic.Int32 // pipelines without their replies yet, plus 1 until land
	done chan struct{}
}

// add counts one more pipeline, whose send lands it.
func (f *flight) add() {
	if f != nil {
		f.left.Add(1)
	}
}

// land ends one count: a pipeline's replies are in, or the caller has
// sent all it counted. The last one ends the flight.
func (f *flight) land() {
	if f != nil && f.left.Add(-1) == 0 {
		f.r.flight.Store(nil)
		close(f.done)
	}
}

func (r *renewer) loop() {
	c := r.c
	defer c.loops.Done()
	defer close(r.exited)
	interval := c.cfg.lease / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case hc := <-r.checks:
			r.check(hc.holds, hc.why)
			close(hc.done)
			continue
		case done := <-r.now:
			r.round()
			close(done)
			continue
		case <-t.C:
		}
		start := time.Now()
		next := interval
		if !r.round() {
			// Retry sooner: a hold is lost only when its lease clock runs
			// out, so a few more tries fit before that.
			next = interval / 3
		}
		// Rounds start every interval, however long the last one took.
		t.Reset(max(next-time.Since(start), time.Millisecond))
	}
}

// round renews every watchdog hold once, and keeps the record of every
// Election term (Client.terms), and reports false if any part of it could
// not reach Redis. The renewals go in batches (calls), in pipelines of at
// most renewChunk holds (defaultRenewChunk), all at once, each pipeline's
// lease clocks moved from its own send time.
func (r *renewer) round() bool {
	c := r.c
	var holds []*hold
	c.clock.each(func(h *hold) {
		if h.watchdog {
			holds = append(holds, h)
		}
	})
	c.mu.Lock()
	terms := make([]*hold, 0, len(c.terms))
	for h := range c.terms {
		if h.isEnded() {
			delete(c.terms, h)
			continue
		}
		terms = append(terms, h)
	}
	c.mu.Unlock()
	var (
		mu      sync.Mutex
		failed  []*hold
		failure error
		wg      sync.WaitGroup
	)
	due := holds
	if c.sessionsOn() {
		defer func(start time.Time) { r.sess.took = time.Since(start) }(time.Now())
		// The session first (its PEXPIRE renews the bound holds); then
		// the holds due this round: all but the bound ones not of this
		// round's phase. (Every hold's tag is renewed, below.)
		failed, failure = r.renewSession(time.Now(), holds)
		due = make([]*hold, 0, len(holds))
		for _, h := range holds {
			if !sessionHold(h) || r.sessionDue(h) {
				due = append(due, h)
			}
		}
	}
	var fl *flight
	if c.sessionsOn() {
		fl = r.takeOff()
	}
	calls := r.calls(due, terms)
	for len(calls) > 0 {
		n, size := 0, 0
		for n < len(calls) && (n == 0 || size+len(calls[n].holds) <= c.cfg.test.renewChunk) {
			size += len(calls[n].holds)
			n++
		}
		part := calls[:n]
		calls = calls[n:]
		wg.Add(1)
		fl.add()
		go func() {
			defer wg.Done()
			if f, err := r.send(part, whyGone, fl); len(f) > 0 {
				mu.Lock()
				failed, failure = append(failed, f...), err
				mu.Unlock()
			}
		}()
	}
	fl.land() // all sent
	if c.cfg.observer.HoldTag != nil {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.lease/2)
		c.renewTags(ctx, holds)
		cancel()
	}
	wg.Wait()
	if len(failed) == 0 {
		r.lastFail.Store(nil)
		return true
	}
	if f := r.lastFail.Load(); f != nil {
		r.lastFail.Store(&renewFail{since: f.since, err: failure})
	} else {
		r.lastFail.Store(&renewFail{since: time.Now(), err: failure})
	}
	if f := c.cfg.observer.RenewFailed; f != nil {
		ids := make([]uint64, len(failed))
		for i, h := range failed {
			ids[i] = h.id
		}
		f(RenewFailed{Err: failure, Holds: len(failed), HoldIDs: ids})
	}
	// A hold whose lease clock ran out meanwhile (the process was paused
	// past its lease, say, which also ends the round's context) is lost:
	// its loss is logged with its cause, not as a failed renewal.
	live := 0
	for _, h := range failed {
		if !h.overdue() {
			live++
		}
	}
	if live == 0 {
		return false
	}
	if errors.Is(failure, context.DeadlineExceeded) || errors.Is(failure, context.Canceled) {
		failure = fmt.Errorf("no reply from Redis within lease/2 (%v): %w", c.cfg.lease/2, failure)
	}
	c.cfg.logger.Warn("dsync: renewal failed; retrying before the lease runs out", "err", failure, "holds", live)
	return false
}

// calls groups the renewals of holds, and the records of the Election
// terms of terms, into batch script calls: per script (the hold kind's
// renewIn; MutexRenewMany for every hold with the mutex's layout) and per
// cluster slot (a script's keys must share one; off a cluster, one for
// all), up to renewBatch holds each (defaultRenewBatch).
func (r *renewer) calls(holds, terms []*hold) []renewCall {
	c := r.c
	type batchOf struct {
		s     *rueidis.Lua
		slot  uint16
		bound bool // a MutexRenewSession batch of bound holds
	}
	var calls []renewCall
	batches := map[batchOf]*renewCall{}
	// Off a cluster the holds of a round mostly share one script: the
	// batch of the last hold is looked up in the map only when the next
	// one's differs, and a batch is made with room for all it will take
	// (a map lookup and the slices' growth were two fifths of this
	// function's time with 20,000 held Mutexes). In a cluster the holds
	// spread over up to 16,384 slots, a few per batch: its slices grow.
	var lastOf batchOf
	var last *renewCall
	size := min(c.cfg.test.renewBatch, len(holds)+len(terms))
	if c.cluster {
		size = 1
	}
	lease := leaseMS(c.cfg.lease)
	add := func(h *hold, s *rueidis.Lua, bound, term bool, key, arg string, keys, args []string) {
		if key == "" {
			key = keys[0]
		}
		var slot uint16
		if c.cluster {
			cmd := c.rc.B().Get().Key(key).Build()
			slot = cmd.Slot()
		}
		of := batchOf{s, slot, bound}
		batch := last
		if batch == nil || of != lastOf {
			batch = batches[of]
		}
		if batch == nil || len(batch.holds) == c.cfg.test.renewBatch {
			if batch != nil {
				calls = append(calls, *batch)
			}
			batch = &renewCall{s: s, term: term, holds: make([]*hold, 0, size), e: rueidis.LuaExec{
				Keys: make([]string, 0, size+1),
				Args: make([]string, 0, size+2),
			}}
			e := &batch.e
			switch s {
			case scripts.MutexRenewSession:
				batch.session, batch.bound = true, bound
				e.Keys, e.Args = scripts.AppendMutexRenewSessionHead(e.Keys, e.Args, r.sess.key, lease, r.sess.sid, bound)
			case scripts.MutexRenewMany:
				e.Args = scripts.AppendMutexRenewManyArgs(e.Args, lease)
			default:
				// renewIn's batch scripts, and ElectionTouchMany: each
				// takes the lease as its ARGV[1] too.
				e.Args = append(e.Args, lease)
			}
			batches[of] = batch
		}
		last, lastOf = batch, of
		batch.holds = append(batch.holds, h)
		if keys == nil {
			// A hold with the mutex's layout (renewKey).
			e := &batch.e
			if batch.session {
				e.Keys, e.Args = scripts.AppendMutexRenewSessionHold(e.Keys, e.Args, key, arg)
			} else {
				e.Keys, e.Args = scripts.AppendMutexRenewManyHold(e.Keys, e.Args, key, arg)
			}
			return
		}
		batch.e.Keys = append(batch.e.Keys, keys...)
		batch.e.Args = append(batch.e.Args, args...)
	}
	for _, h := range holds {
		if key, value, ok := h.ops.renewKey(h); ok {
			if r.sess.sid != "" && sessionHold(h) {
				if h.leaving() {
					// Its release may reach Redis before this batch,
					// which must then not bind it (see takeOff).
					continue
				}
				add(h, scripts.MutexRenewSession, h.bound, false, key, value, nil, nil)
				continue
			}
			add(h, scripts.MutexRenewMany, false, false, key, value, nil, nil)
			continue
		}
		s, keys, args := h.ops.renewIn(h)
		add(h, s, false, false, "", "", keys, args)
	}
	if len(terms) > 0 {
		c.mu.Lock()
		for _, h := range terms {
			if t, ok := c.terms[h]; ok {
				add(h, scripts.ElectionTouchMany, false, true, "", "", t.keys, t.args)
			}
		}
		c.mu.Unlock()
	}
	for _, batch := range batches {
		calls = append(calls, *batch)
	}
	return calls
}

// send sends calls in one pipelined round trip, applies the replies, and
// returns the holds it could not renew (Redis unreachable), with the error.
// A hold found gone is lost for the reason why (whyGone, whyForced,
// whyMissed).
// A term's record not kept (Redis unreachable) is kept at the next round,
// as before its lock's lease runs out; one whose lock is no longer the
// term's is not kept again.
//
// fl, if not nil, is the flight the calls are part of: it is landed
// once their replies are in, before they are applied.
func (r *renewer) send(calls []renewCall, why string, fl *flight) (failed []*hold, failure error) {
	c := r.c
	// A pipeline may take up to lease/2: its holds' lease clocks, not this
	// bound, decide when they are lost. Not c.ctx, which Close cancels
	// before it releases the holds: a batch cut off then may still run in
	// Redis, after a release (see takeOff); Close waits for the round
	// (renewer.exited), within its own budget (cleanCtx).
	ctx, cancel := context.WithTimeout(c.cleanCtx, c.cfg.lease/2)
	defer cancel()

	sentAt := time.Now()
	if f := c.cfg.test.sessionSending; f != nil && slices.ContainsFunc(calls, func(call renewCall) bool { return call.session }) {
		f()
	}
	res := r.exec(ctx, calls)
	fl.land()
	for i, call := range calls {
		var gone, flipped []int64
		var err error
		if call.session {
			gone, flipped, err = sessionReply(res[i])
		} else {
			gone, err = res[i].AsIntSlice()
		}
		for _, k := range gone {
			if k < 1 || int(k) > len(call.holds) {
				err = errors.New("dsync: unexpected reply from the renewal script")
			}
		}
		if err != nil {
			if !call.term {
				failed = append(failed, call.holds...)
				failure = err
			}
			if call.session {
				// Written again every round until a reply says it is bound
				// (its lease clock may then follow the session).
				for _, h := range call.holds {
					h.bound = false
				}
			}
			continue
		}
		if call.session {
			// Bound as the batch believed, but for those flipped.
			next := 0 // flipped is in order
			for k, h := range call.holds {
				flip := next < len(flipped) && int(flipped[next]) == k+1
				if flip {
					next++
				}
				h.bound = call.bound != flip
			}
		}
		if call.term {
			if len(gone) > 0 {
				c.mu.Lock()
				for _, k := range gone {
					delete(c.terms, call.holds[k-1])
				}
				c.mu.Unlock()
			}
			continue
		}
		next := 0 // gone is in order
		for k, h := range call.holds {
			ok := next >= len(gone) || int(gone[next]) != k+1
			if !ok {
				next++
			}
			// A hold handed on inside the Client while the renewal was in
			// flight is the same hold in Redis: the reply is its
			// successor's, renewal or loss alike (renewReply).
			h.renewReply(ok, sentAt, c.cfg.lease, why)
			if f := c.cfg.test.renewReplied; f != nil {
				f(h, ok, sentAt)
			}
		}
	}
	return failed, failure
}

// A renewCall is one batch script call of a renewal round: the holds it
// renews or, with term, the holds whose Election term's record it keeps.
type renewCall struct {
	s     *rueidis.Lua
	e     rueidis.LuaExec
	holds []*hold
	term  bool
	// session: a MutexRenewSession call, whose first key is the session
	// key, whose reply also names the holds whose binding to the session
	// is not bound's (a batch of holds believed bound, or not).
	session, bound bool
}

// exec sends the calls in one pipeline as EVALSHA; the few the server did
// not know the script for (a restart, a failover, SCRIPT FLUSH), and any
// script not made by the scripts package, go through Exec, which falls back
// to EVAL.
func (r *renewer) exec(ctx context.Context, calls []renewCall) []rueidis.RedisResult {
	rc := r.c.rc
	res := make([]rueidis.RedisResult, len(calls))
	cmds := make(rueidis.Commands, 0, len(calls))
	idx := make([]int, 0, len(calls))
	var single []int
	for i := range calls {
		calls[i].s = r.c.lua(calls[i].s)
		call := calls[i]
		sha, ok := scripts.SHA1(call.s)
		if !ok {
			single = append(single, i)
			continue
		}
		cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(int64(len(call.e.Keys))).Key(call.e.Keys...).Arg(call.e.Args...).Build())
		idx = append(idx, i)
	}
	for k, rr := range rc.DoMulti(ctx, cmds...) {
		res[idx[k]] = rr
		if e, ok := rueidis.IsRedisErr(rr.Error()); ok && e.IsNoScript() {
			single = append(single, idx[k])
		}
	}
	for _, i := range single {
		res[i] = calls[i].s.Exec(ctx, rc, calls[i].e.Keys, calls[i].e.Args)
	}
	return res
}

// preload loads the Client's scripts into every node, so that the first
// renewal round is one EVALSHA round trip like the others, however far away
// Redis is. It runs on its own goroutine, with no deadline but Close: on a
// slow server a deadline could cut a batch short, and a RESP2 connection
// whose call is abandoned is closed under every call sharing it. A node
// that lacks a script (not loaded yet, restart, failover) is served by
// exec's NOSCRIPT fallback. The function library comes first (see
// runScript), in place of the scripts it runs.
//
// It sends on a connection of its own to each node (rueidis' Dedicate,
// closed after), one script per round trip: the caller's first calls
// do not queue behind it, and they keep the connection they share as
// rueidis opened it. rueidis answers a lone caller on the caller's
// goroutine until two calls are in flight at once on that connection;
// from then on, for good, through its pipelining goroutines: about 25 us
// more per Lock/Unlock cycle for a caller who locks one lock at a time
// (a serial cycle of raw's SET NX and compare-and-delete: 94 us on a
// fresh rueidis Client, 121 us on one that pipelines). The preload's
// calls, sent beside the caller's first ones, switched it at once.
//
// Its commands are pinned (never recycled by rueidis), as pinResent pins
// what rueidis may send again: a precaution, since rueidis does not send
// these again (they are not marked retryable). The data race reports that
// TestSemaphoreLockerRedisRestart drew once the preload left the shared
// connection came from another load, Lua.ExecMulti's (see
// sharedDial.Nodes).
//
// Close does not cut the dial of those connections short (Dedicate takes
// no context): against a server that accepts no connection and does not
// refuse it either, a Close right after NewClient waits for rueidis' own
// dial timeout.
func (r *renewer) preload() {
	c := r.c
	defer c.loops.Done()
	defer close(c.preloaded)
	var conns []nodeConn
	for _, n := range c.rc.Nodes() {
		d, _ := n.Dedicate()
		defer d.Close()
		conns = append(conns, d)
	}
	// The scripts the library runs are not loaded as scripts too when it
	// loaded (they are then called as scripts only after a refusal or a
	// failed load, through Exec's EVAL fallback).
	functions := c.loadFunctionsOn(c.ctx, 0, conns)
	srcs := scripts.Used(c.sharded)
	for _, n := range conns {
		for _, src := range srcs {
			if c.closed.Load() {
				return
			}
			if functions && scripts.InLibrary(src, c.sharded) {
				continue
			}
			if err := n.Do(c.ctx, n.B().ScriptLoad().Script(src).Build().Pin()).Error(); err != nil {
				c.cfg.logger.Debug("dsync: preloading scripts failed", "err", err)
				break
			}
		}
	}
}
