package dsync

import (
	"context"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// renewBatch bounds the scripts pipelined in one renewal round trip.
const renewBatch = 1024

// The renewer is the Client's single watchdog: every lease/3 it renews all
// watchdog holds, pipelined, one batch per script.
type renewer struct {
	c     *Client
	mu    sync.Mutex
	holds map[*hold]struct{}
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, holds: make(map[*hold]struct{})}
}

func (r *renewer) add(h *hold) {
	r.mu.Lock()
	r.holds[h] = struct{}{}
	r.mu.Unlock()
}

func (r *renewer) remove(h *hold) {
	r.mu.Lock()
	delete(r.holds, h)
	r.mu.Unlock()
}

func (r *renewer) loop() {
	c := r.c
	defer c.loops.Done()
	interval := c.cfg.lease / 3
	r.preload()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
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

// round renews every watchdog hold once; it reports false if any batch could
// not reach Redis.
func (r *renewer) round() bool {
	c := r.c
	r.mu.Lock()
	holds := make([]*hold, 0, len(r.holds))
	for h := range r.holds {
		holds = append(holds, h)
	}
	r.mu.Unlock()
	if len(holds) == 0 {
		return true
	}
	// c.ctx ends with Close, which must not wait for a slow round. A round
	// may take up to lease/2: its holds' lease clocks, not this bound,
	// decide when they are lost.
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.lease/2)
	defer cancel()
	type group struct {
		holds []*hold
		execs []rueidis.LuaExec
	}
	groups := make(map[*rueidis.Lua]*group)
	for _, h := range holds {
		s, e := h.renewCmd()
		g := groups[s]
		if g == nil {
			g = &group{}
			groups[s] = g
		}
		g.holds = append(g.holds, h)
		g.execs = append(g.execs, e)
	}
	ok := true
	for s, g := range groups {
		for i := 0; i < len(g.execs); i += renewBatch {
			j := min(i+renewBatch, len(g.execs))
			sentAt := time.Now()
			res := r.exec(ctx, s, g.execs[i:j])
			var failed error
			for k, rr := range res {
				h := g.holds[i+k]
				n, err := rr.AsInt64()
				switch {
				case err != nil:
					failed = err
				case n == 1:
					h.renewed(sentAt, c.cfg.lease)
				case h.isReleasing():
					// Released while the renewal was in flight: the releaser ends it.
				default:
					h.end(ErrLockLost, true)
				}
			}
			if failed != nil {
				ok = false
				if f := c.cfg.observer.RenewFailed; f != nil {
					ids := make([]uint64, 0, j-i)
					for _, h := range g.holds[i:j] {
						ids = append(ids, h.id)
					}
					f(RenewFailed{Err: failed, Holds: j - i, HoldIDs: ids})
				}
				c.cfg.logger.Warn("dsync: renewal failed", "err", failed, "holds", j-i)
			}
		}
	}
	return ok
}

// exec runs a batch of one script in one round trip per node: EVALSHA
// through DoMulti, then, only for the commands the server did not know the
// script for (a restart, a failover, SCRIPT FLUSH), ExecMulti, which loads it.
func (r *renewer) exec(ctx context.Context, s *rueidis.Lua, execs []rueidis.LuaExec) []rueidis.RedisResult {
	rc := r.c.rc
	sha, ok := scripts.SHA1(s)
	if !ok {
		return s.ExecMulti(ctx, rc, execs...)
	}
	cmds := make(rueidis.Commands, len(execs))
	for i, e := range execs {
		cmds[i] = rc.B().Evalsha().Sha1(sha).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
	}
	res := rc.DoMulti(ctx, cmds...)
	var missing []int
	for i, rr := range res {
		if e, ok := rueidis.IsRedisErr(rr.Error()); ok && e.IsNoScript() {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		again := make([]rueidis.LuaExec, len(missing))
		for k, i := range missing {
			again[k] = execs[i]
		}
		for k, rr := range s.ExecMulti(ctx, rc, again...) {
			res[missing[k]] = rr
		}
	}
	return res
}

// preload loads every script into every node, so that the first renewal
// round is one EVALSHA round trip like the others, however far away Redis
// is. A node that lost them later (restart, failover) is served by exec's
// NOSCRIPT fallback.
func (r *renewer) preload() {
	c := r.c
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.lease/3)
	defer cancel()
	srcs := scripts.All()
	for _, n := range c.rc.Nodes() {
		cmds := make(rueidis.Commands, len(srcs))
		for i, src := range srcs {
			cmds[i] = n.B().ScriptLoad().Script(src).Build()
		}
		for _, rr := range n.DoMulti(ctx, cmds...) {
			if err := rr.Error(); err != nil {
				c.cfg.logger.Debug("dsync: preloading scripts failed", "err", err)
				break
			}
		}
	}
}
