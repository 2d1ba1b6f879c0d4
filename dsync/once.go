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

// A Once runs a function successfully at most once per name across every
// Client, in any process, that uses the same key prefix: the cross-process
// counterpart of sync.Once, for failures that are worth another try.
//
// The done state is durable in Redis (it has no expiry; delete the keys of
// the name to run the function again). While a caller runs f it holds a
// "running" marker under a lease the Client's watchdog renews (or a fixed
// one, with WithLeaseTime); other callers wait for it. If f returns an
// error, panics, or its process dies (the lease lapses), the next caller
// runs f instead.
//
// A Once is safe for concurrent use. Its zero value is not usable; create
// Onces with Client.NewOnce. A Once may be copied only before first use.
type Once struct {
	c     *Client
	name  string
	state string // hash: done, val, tok
	run   string // the running marker "<owner> <token>"
	ch    string // published when a run ends
	err   error
	lc    lockConfig
	info  Lock // what events say of its runs
}

// NewOnce returns the Once called name. An invalid name makes every call
// fail with ErrInvalidArgument.
func (c *Client) NewOnce(name string, opts ...LockOption) *Once {
	return c.newOnce("once", name, opts)
}

func (c *Client) newOnce(kind, name string, opts []LockOption) *Once {
	base := c.lockKey(kind, name)
	return &Once{c: c, name: name, state: base, run: base + ":run", ch: base + ":ch", err: checkName(name), lc: newLockConfig(opts),
		info: Lock{Kind: KindOnce, Name: name, N: 1}}
}

// Do calls f if and only if no call of f for this name has succeeded yet,
// in any process, and no other call is running; if one is running, Do waits
// for it and returns nil if it succeeded, or runs f itself if it failed.
//
// f receives a lock context derived from ctx that carries the run's owner
// and fencing token, and is cancelled with cause ErrLockLost if the run's
// lease is lost; a storage system can use the token to reject a run that
// lost its lease. Do returns f's error; if f panics, Do gives up the run
// and panics with the same value. If the run's lease was lost and another
// run took over, Do returns an error that errors.Is ErrLockLost and the
// result is not recorded.
//
// Calling Do from inside f with f's context (or one derived from it)
// returns ErrInvalidArgument (sync.Once would deadlock). That is decided per
// call, not per owner: concurrent calls whose contexts carry the same owner
// wait for the run like any other. A wait ended by ctx returns an error for
// which errors.Is(err, ctx.Err()) holds.
func (o *Once) Do(ctx context.Context, f func(context.Context) error) error {
	if f == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	_, err := o.do(ctx, func(ctx context.Context) (string, error) { return "", f(ctx) })
	return err
}

// OnceValue returns a function that calls f at most once successfully per
// name across all processes (through a Once of c named name) and returns
// its result. The result is stored in Redis JSON-encoded (encoding/json),
// so every process, including ones that start later, gets the same value;
// T must therefore survive a JSON round trip (exported fields, no
// channels or funcs). The value is cached in the returned function after
// the first successful call. A failed call returns f's error and lets the
// next call try again.
//
// OnceValue's names are separate from those of NewOnce.
func OnceValue[T any](c *Client, name string, f func(context.Context) (T, error)) func(context.Context) (T, error) {
	o := c.newOnce("oncevalue", name, nil)
	var (
		mu   sync.Mutex
		done bool
		v    T
	)
	return func(ctx context.Context) (T, error) {
		mu.Lock()
		if done {
			r := v
			mu.Unlock()
			return r, nil
		}
		mu.Unlock()
		var zero T
		if f == nil {
			return zero, fmt.Errorf("%w: nil function", ErrInvalidArgument)
		}
		raw, err := o.do(ctx, func(ctx context.Context) (string, error) {
			r, err := f(ctx)
			if err != nil {
				return "", err
			}
			b, err := json.Marshal(r)
			if err != nil {
				return "", fmt.Errorf("dsync: OnceValue %q: encoding the result: %w", shortName(name), err)
			}
			return string(b), nil
		})
		if err != nil {
			return zero, err
		}
		var r T
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			return zero, fmt.Errorf("dsync: OnceValue %q: decoding the stored result: %w", shortName(name), err)
		}
		mu.Lock()
		if !done {
			done, v = true, r
		}
		mu.Unlock()
		return r, nil
	}
}

// do runs the Once protocol; it returns the stored result when done.
func (o *Once) do(ctx context.Context, f func(context.Context) (string, error)) (string, error) {
	c := o.c
	if err := c.checkCall(ctx, o.err); err != nil {
		return "", err
	}
	if ctx.Value(onceRunKey{o.state}) != nil {
		return "", fmt.Errorf("%w: Once %q: Do called from inside its own f", ErrInvalidArgument, shortName(o.name))
	}
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	lease := o.lc.leaseTime
	if lease == 0 {
		lease = c.cfg.lease
	}
	ctx, ob := c.observe(ctx, o.info, owner, false)
	call := c.attemptID() // names this Do call's run, for its exact undo
	val, tok, sentAt, attempts, err := o.begin(ctx, owner, call, lease)
	var h *hold
	var mark string
	if tok != 0 {
		mark = owner + " " + strconv.FormatUint(tok, 10) + " " + call
		h = o.newHold(owner, tok, mark)
	}
	ob.done(h, false, attempts, err)
	if h == nil {
		return val, wrapErr(KindOnce, o.name, err)
	}
	return o.runF(ctx, h, mark, sentAt, lease, f)
}

// begin waits, in the wait loop (waitLoop), until f is done (it returns
// the stored result) or this owner may run it (it returns the run's token
// and when the run began). The end of a run is published on o.ch; the
// fallback is the running marker's remaining lease.
func (o *Once) begin(ctx context.Context, owner, call string, lease time.Duration) (val string, tok uint64, sentAt time.Time, attempts int, err error) {
	a := onceAttempt{o: o, ctx: ctx, call: call,
		keys: []string{o.state, o.run, o.run + ":undone"}, args: []string{owner, leaseMS(lease), call}}
	attempts, err = waitLoop(o.c, ctx, o.ch, "", false, onceWait{&a})
	return a.val, a.tok, a.sentAt, attempts, err
}

// onceAttempt is the state of one Do call's wait in Redis.
type onceAttempt struct {
	o          *Once
	ctx        context.Context
	call       string
	keys, args []string
	sentAt     time.Time
	val        string // the stored result, when f is done
	tok        uint64 // the run's token, when this call runs f
}

// onceWait is a Do call's waitProto.
type onceWait struct{ a *onceAttempt }

func (w onceWait) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	a := w.a
	a.sentAt = time.Now()
	res, err := scripts.OnceBegin.Exec(ctx, a.o.c.rc, a.keys, a.args).ToArray()
	var code int64
	if err == nil && len(res) > 0 {
		code, err = res[0].AsInt64()
	}
	if err == nil && len(res) != 2 {
		err = errors.New("dsync: unexpected reply from the once script")
	}
	if err != nil {
		return true, 0, err
	}
	switch code {
	case 2:
		a.val, err = res[1].ToString()
		return true, 0, err
	case 1:
		t, err := res[1].AsInt64()
		a.tok = uint64(t)
		return true, 0, err
	}
	pttl, _ := res[1].AsInt64()
	return false, time.Duration(max(pttl, 1)) * time.Millisecond, nil // at 0 the marker expires now: look again soon
}

// failed undoes this call exactly: a lost reply may hide a started run (a
// begin still on its way then does nothing). In the background, so the
// call returns by its deadline.
func (w onceWait) failed(error) {
	o, call := w.a.o, w.a.call
	o.c.background(func(bctx context.Context) { o.undo(bctx, call) })
}

func (w onceWait) waiting() {
	a := w.a
	a.o.c.blocked(a.ctx, a.o.info, a.o.state)
}

func (onceWait) gaveUp() {}

// onceRunKey marks the context a run passes to f, so that a Do through it
// (one inside f) is told apart from a concurrent Do of the same owner. The
// state key names the Once across Clients of one prefix.
type onceRunKey struct{ state string }

// undo takes back the Do call named call (once_undo.lua): its run, if its
// begin started one, and any begin of it still on its way.
func (o *Once) undo(ctx context.Context, call string) {
	keys := []string{o.state, o.run, o.run + ":undone", o.ch}
	_ = idempotent(ctx, func(ctx context.Context) error {
		return o.c.lua(scripts.OnceUndo).Exec(ctx, o.c.rc, keys, []string{call, leaseMS(o.c.cfg.lease)}).Error()
	})
}

// newHold makes the hold of a run whose running marker is mark ("<owner>
// <token> <call>"): its lease is the marker's.
func (o *Once) newHold(owner string, tok uint64, mark string) *hold {
	c := o.c
	h := c.newHold(&o.info, owner, tok)
	h.key = o.state
	h.watchdog = o.lc.leaseTime == 0
	h.ops = &onceHold{o: o, mark: mark}
	return h
}

// onceHold is the holdOps of a run: its running marker.
type onceHold struct {
	o    *Once
	mark string
}

func (oh *onceHold) renewKey(*hold) (string, string, bool) { return "", "", false }

func (oh *onceHold) renewExec(*hold) (*rueidis.Lua, rueidis.LuaExec) {
	return scripts.OnceRenew, rueidis.LuaExec{Keys: []string{oh.o.run}, Args: []string{oh.mark, leaseMS(oh.o.c.cfg.lease)}}
}

// releaseExec ends the run as failed (Close: f's outcome is unknown).
func (oh *onceHold) releaseExec(*hold) (*rueidis.Lua, rueidis.LuaExec) {
	o := oh.o
	return scripts.OnceEnd, rueidis.LuaExec{Keys: []string{o.state, o.run, o.ch}, Args: []string{oh.mark, "fail", ""}}
}

func (oh *onceHold) ended(*hold, bool) {}

// runF runs f under hold h of the running marker and records the outcome.
func (o *Once) runF(ctx context.Context, h *hold, mark string, sentAt time.Time, lease time.Duration,
	f func(context.Context) (string, error)) (val string, err error) {
	if !h.track(sentAt, lease) {
		o.end(ctx, mark, "fail", "")
		return "", ErrClosed
	}
	lctx := h.newCtx(context.WithValue(ctx, onceRunKey{o.state}, true))
	released := func(err error) {
		h.end(errReleased, false)
		if f := o.c.cfg.observer.Released; f != nil {
			f(ctx, Released{Lock: *h.lock, Hold: h.id, Held: time.Since(h.start), Err: err, Complete: true})
		}
	}
	ok := false
	defer func() {
		if !ok {
			// f panicked: give the next caller its turn; the panic goes on.
			h.beginRelease()
			_, err := o.end(ctx, mark, "fail", "")
			released(err)
		}
	}()
	val, err = f(lctx)
	ok = true
	if err != nil {
		h.beginRelease()
		_, eerr := o.end(ctx, mark, "fail", "")
		released(eerr)
		return "", err
	}
	// The hold ends after the outcome is recorded, so a lease lost during
	// f still shows in its context.
	h.beginRelease()
	res, eerr := o.end(ctx, mark, "ok", val)
	released(eerr)
	if eerr != nil {
		return "", wrapErr(KindOnce, o.name, eerr)
	}
	code, _ := res[0].AsInt64()
	switch code {
	case 1:
		return val, nil
	case 2:
		return res[1].ToString()
	}
	return "", fmt.Errorf("dsync: Once %q: the run lost its lease to another run, its result was discarded: %w", shortName(o.name), ErrLockLost)
}

// end records a run's outcome, retrying a lost reply (the script is
// idempotent for one marker), under a context that outlives ctx.
func (o *Once) end(ctx context.Context, marker, outcome, val string) ([]rueidis.RedisMessage, error) {
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	var res []rueidis.RedisMessage
	var err error
	for try := 1; try <= 3; try++ {
		res, err = o.c.lua(scripts.OnceEnd).Exec(cctx, o.c.rc, []string{o.state, o.run, o.ch}, []string{marker, outcome, val}).ToArray()
		if err == nil || isRedisErr(err) || cctx.Err() != nil {
			break
		}
	}
	if err == nil && len(res) == 0 {
		err = errors.New("dsync: unexpected reply from the once script")
	}
	return res, err
}

func (onceWait) granted(uint64) bool { return false } // no grants: it looks again
