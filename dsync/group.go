package dsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A Group runs a function once among all concurrent callers of one key, in
// every process whose Client uses the same key prefix and group name: the
// cross-process counterpart of golang.org/x/sync/singleflight.Group. Results
// reach other processes as JSON, so V must survive encoding/json.
//
// A Group is safe for concurrent use. Its zero value is not usable; create
// Groups with NewGroup. A Group must not be copied after first use.
type Group[V any] struct {
	c      *Client
	name   string
	base   string // the index of keys with a record; a key's keys add ":<part>:<key>"
	err    error
	lc     lockConfig
	info   Lock
	ttlArg string

	// mu guards calls and the groupCalls in it (see groupCall). Lock
	// order: Group.mu → Client.mu (leaveLocked; see locking.go).
	mu    sync.Mutex
	calls map[string]*groupCall[V] // the keys this process is calling now
}

// A groupCall is one key's calls in this process: one leader talks to
// Redis (or runs fn), the others wait for its result. rec and keys are set
// by newCall, read-only after; n to err are guarded by Group.mu; call and
// tried are the leader's (below).
type groupCall[V any] struct {
	rec      runRecord
	keys     []string      // its key's keys (scripts.GroupKeys), for unwait
	n        int           // callers waiting here, the leader among them
	leading  bool          // a caller is the leader
	changed  chan struct{} // closed when the call finishes or its leader leaves
	finished bool
	v        V
	err      error

	// call names this process's wait in Redis (see group_begin.lua);
	// tried says a begin was sent with it. The leader of the moment owns
	// both; with no leader (leading false), Group.mu guards them
	// (leaveLocked).
	call  string
	tried bool
}

// NewGroup returns the Group called name of c. Its options are WithLeaseTime
// (the leader's lease) and WithResultTTL. An invalid name makes every call
// fail with ErrInvalidArgument.
func NewGroup[V any](c *Client, name string, opts ...LockOption) *Group[V] {
	g := &Group[V]{c: c, name: name, base: c.lockKey("group", name), err: checkName(name), lc: newLockConfig(opts),
		info: Lock{Kind: KindGroup, Name: name, N: 1}, calls: make(map[string]*groupCall[V])}
	g.ttlArg = "0"
	if g.lc.resultTTL > 0 {
		g.ttlArg = leaseMS(g.lc.resultTTL)
	}
	return g
}

// WithResultTTL keeps each result of a Group in Redis for d after its run
// ended, so that calls in that time get it without running fn again. Other
// primitives ignore it.
func WithResultTTL(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d > 0 {
			c.resultTTL = max(d, time.Millisecond)
		}
	}
}

// Do runs fn and returns its result, unless a call of the same key is
// running in any process: then it waits for that call and returns its
// result, with shared true. An error is shared too (in other processes, as
// an error with the same message). If the running call ends without a result
// (its ctx ended, fn panicked, its process died), a waiting caller runs fn
// instead. If fn panics, Do panics with the same value.
//
// fn's context is a lock context, carrying the run's fencing token and
// cancelled with cause ErrLockLost if the run's lease is lost; if that
// lease has run out before fn can start (a paused or starved process),
// fn is not run and Do returns an error matching ErrLockLost. Calling Do
// for the same key from inside fn with fn's context returns
// ErrInvalidArgument, as does an invalid key.
func (g *Group[V]) Do(ctx context.Context, key string, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	if err := g.check(ctx, key); err != nil {
		return v, false, err
	}
	if fn == nil {
		return v, false, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	if ctx.Value(groupRunKey{g.base, key}) != nil {
		return v, false, fmt.Errorf("%w: Group %q: Do called from inside fn of the same key", ErrInvalidArgument, shortName(g.name))
	}
	// A caller that waits for this process's leader is a call Close waits
	// for (it leaves the wait in Redis as it returns); the leader's part
	// counts its own wait (redisDo).
	if err := g.c.enter(); err != nil {
		return v, false, err
	}
	entered := true
	defer func() {
		if entered {
			g.c.exit()
		}
	}()
	g.mu.Lock()
	gc := g.calls[key]
	if gc == nil {
		gc = g.newCall(key)
		g.calls[key] = gc
	}
	gc.n++
	for {
		if gc.finished {
			v, err = gc.v, gc.err
			g.mu.Unlock()
			return v, true, err
		}
		if !gc.leading {
			gc.leading = true
			g.mu.Unlock()
			entered = false
			g.c.exit()
			return g.lead(ctx, key, gc, fn)
		}
		ch := gc.changed
		g.mu.Unlock()
		var done error
		select {
		case <-ch:
		case <-ctx.Done():
			done = ctx.Err()
		case <-g.c.done:
			done = ErrClosed
		}
		g.mu.Lock()
		if done != nil && !gc.finished {
			g.leaveLocked(key, gc)
			g.mu.Unlock()
			return v, false, done
		}
	}
}

// check validates what every call needs.
func (g *Group[V]) check(ctx context.Context, key string) error {
	if err := g.c.checkCall(ctx, g.err); err != nil {
		return wrapErr(KindGroup, g.name, err)
	}
	if key == "" || len(key) > MaxNameLen {
		return fmt.Errorf("%w: Group %q: key of %d bytes (1 to MaxNameLen)", ErrInvalidArgument, shortName(g.name), len(key))
	}
	return nil
}

// groupRunKey marks the context a leader passes to fn.
type groupRunKey struct{ base, key string }

// groupKeys returns the keys of key's record of the Group whose index is b:
// state, run, undone, channel, waiters, and the Group's index
// (scripts.GroupKeys).
func groupKeys(b, key string) []string { return scripts.GroupKeys(b, key) }

func (g *Group[V]) newCall(key string) *groupCall[V] {
	k, ttl := groupKeys(g.base, key), g.ttlArg
	look := leaseMS(g.lc.leaseTime) // how long a waiter may take to look
	if g.lc.leaseTime == 0 {
		look = g.c.args.lease
	}
	gc := &groupCall[V]{changed: make(chan struct{}), call: g.c.attemptID(), keys: k}
	gc.rec = runRecord{c: g.c, name: g.name, info: &g.info, lc: g.lc, state: k[0], run: k[1], ch: k[3],
		begin: func(owner, lease, call string) scripts.Call {
			return scripts.GroupBeginCall(k, owner, lease, call, key, ttl)
		},
		end: func(mark, outcome, val string) scripts.Call {
			return scripts.GroupEndCall(k, mark, outcome, val, key, ttl, look)
		},
		undo: func(call, remember string) scripts.Call { return scripts.GroupUndoCall(k, call, remember, key) }}
	return gc
}

// leaveLocked takes a caller that gives up out of gc; the last one takes the
// process's wait out of Redis. g.mu is held.
func (g *Group[V]) leaveLocked(key string, gc *groupCall[V]) {
	if gc.n--; gc.n > 0 || gc.leading || gc.finished {
		return
	}
	if g.calls[key] == gc {
		delete(g.calls, key)
	}
	if gc.tried {
		g.unwait(key, gc)
	}
}

// unwait takes gc's place among the waiters in Redis back, in the
// background, and gives gc a new call id: a begin whose reply was lost is
// undone by the wait loop itself (runRecord.undoCall), which makes its
// call id unusable.
func (g *Group[V]) unwait(key string, gc *groupCall[V]) {
	c, x := g.c, scripts.GroupLeaveCall(gc.keys, gc.call, key)
	gc.call, gc.tried = c.attemptID(), false
	c.background(func(ctx context.Context) {
		_ = idempotent(ctx, func(ctx context.Context) error {
			return c.run(ctx, x).Error()
		})
	})
}

// lead makes the caller gc's leader: it waits in Redis, or runs fn, and
// then either finishes gc for every caller here or, if its own end came
// first (ctx, panic), lets the next caller lead.
func (g *Group[V]) lead(ctx context.Context, key string, gc *groupCall[V], fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	finished := false
	defer func() {
		g.mu.Lock()
		if finished {
			gc.finished, gc.v, gc.err = true, v, err
			if g.calls[key] == gc {
				delete(g.calls, key)
			}
		} else {
			gc.leading = false
			g.leaveLocked(key, gc)
		}
		close(gc.changed)
		gc.changed = make(chan struct{})
		g.mu.Unlock()
	}()
	v, shared, err, finished = g.redisDo(ctx, key, gc, fn)
	return v, shared, err
}

// redisDo is the leader's part: it waits in Redis for key's result, or
// runs fn. finished false means the leader's own end (ctx) stopped it,
// which the other callers here must not share.
func (g *Group[V]) redisDo(ctx context.Context, key string, gc *groupCall[V], fn func(context.Context) (V, error)) (v V, shared bool, err error, finished bool) {
	c := g.c
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	ctx, ob := c.observe(ctx, g.info, owner, false)
	gc.tried = true
	// The wait is a call Close waits for (fn, which may run long, is not).
	if err := c.enter(); err != nil {
		ob.done(nil, false, 0, err)
		return v, false, err, true
	}
	w, err := gc.rec.wait(ctx, owner, gc.call)
	ob.done(w.h, false, w.attempts, err)
	if err != nil {
		g.unwait(key, gc)
		c.exit()
		return v, false, wrapErr(KindGroup, g.name, err), ctxErr(ctx) == nil
	}
	if w.h == nil {
		c.exit()
		if w.failed {
			return v, true, errors.New(w.val), true
		}
		if err := json.Unmarshal([]byte(w.val), &v); err != nil {
			return v, true, fmt.Errorf("dsync: Group %q: decoding the result: %w", shortName(g.name), err), true
		}
		return v, true, nil, true
	}
	claimed := gc.rec.claim(ctx, w)
	c.exit()
	if !claimed {
		return v, false, wrapErr(KindGroup, g.name, ErrClosed), true
	}
	e := gc.rec.runF(ctx, w, groupRunKey{g.base, key}, func(ctx context.Context) (string, error) {
		r, err := fn(ctx)
		if err != nil {
			return "", err
		}
		v = r
		b, err := json.Marshal(r)
		if err != nil {
			return "", fmt.Errorf("dsync: Group %q: encoding the result: %w", shortName(g.name), err)
		}
		return string(b), nil
	}, func(err error) (string, string) {
		if ctxErr(ctx) != nil {
			return "fail", "" // the leader's own end: a waiter runs fn
		}
		return "err", err.Error()
	})
	if e.err != nil {
		var zero V
		return zero, false, e.err, ctxErr(ctx) == nil
	}
	// A result Redis could not record is still this call's: waiters
	// elsewhere run fn after the run's lease.
	return v, false, nil, true
}

// Forget drops key's record, in this process and in Redis, so that the next
// call of key runs fn again, even if a result is kept or a run is in
// progress: that run's result is then not recorded.
func (g *Group[V]) Forget(ctx context.Context, key string) error {
	if err := g.check(ctx, key); err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
	return wrapErr(KindGroup, g.name, g.c.groupForget(ctx, g.base, key))
}

// groupForget runs group_forget.lua for key of the Group whose keys start
// with base: Forget's and ForceUnlock's (forceGroup).
func (c *Client) groupForget(ctx context.Context, base, key string) error {
	return c.run(ctx, scripts.GroupForgetCall(groupKeys(base, key), key)).Error()
}

// inspectGroup reads the records of the Group called name (for Inspect):
// the keys listed in its index, then each key's record.
func (c *Client) inspectGroup(ctx context.Context, name string) ([]LockState, error) {
	base := c.lockKey("group", name)
	// Lapsed entries of the index are pruned lazily: a key whose record
	// has gone is skipped below.
	keys, err := c.rc.Do(ctx, c.rc.B().Zrange().Key(base).Min("0").Max(strconv.Itoa(maxInspectWaiters-1)).Build()).AsStrSlice()
	if err != nil || len(keys) == 0 {
		return nil, wrapErr(KindGroup, name, err)
	}
	execs := make([]rueidis.LuaExec, len(keys))
	for i, k := range keys {
		ks := groupKeys(base, k)
		execs[i] = scripts.InspectOtherCall("group", []string{ks[0], ks[1], ks[4]}, maxInspectWaiters).LuaExec
	}
	return inspected(nil, name, scripts.InspectOther.ExecMulti(ctx, c.rc, execs...), parseOtherState,
		func(int) Kind { return KindGroup }, func(i int) string { return keys[i] })
}

// forceGroup forgets every key of the Group called name that has a run in
// progress (for ForceUnlock); it reports whether there was one.
func (c *Client) forceGroup(ctx context.Context, name string) (bool, error) {
	base := c.lockKey("group", name)
	keys, err := c.rc.Do(ctx, c.rc.B().Zrange().Key(base).Min("0").Max("-1").Build()).AsStrSlice()
	forced := false
	for _, k := range keys {
		if err != nil {
			break
		}
		ks := groupKeys(base, k)
		var n int64
		if n, err = c.rc.Do(ctx, c.rc.B().Exists().Key(ks[1]).Build()).AsInt64(); err == nil && n > 0 {
			err = c.groupForget(ctx, base, k)
			forced = forced || err == nil
		}
	}
	return forced, wrapErr(KindGroup, name, err)
}
