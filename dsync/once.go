package dsync

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/dsync/dsync/internal/scripts"
)

// A Once runs a function successfully at most once per name across every
// Client, in any process, that uses the same key prefix: the cross-process
// counterpart of sync.Once, for failures that are worth another try. Its
// done state is durable in Redis. If f fails, panics, or its process dies,
// the next caller runs f.
//
// A Once is safe for concurrent use. Its zero value is not usable; create
// Onces with Client.NewOnce. A Once may be copied only before first use.
type Once struct {
	runRecord
	err error
	// info is what events say of its runs.
	info Lock
}

// NewOnce returns the Once called name. An invalid name makes every call
// fail with ErrInvalidArgument.
func (c *Client) NewOnce(name string, opts ...LockOption) *Once {
	return c.newOnce("once", name, opts)
}

func (c *Client) newOnce(kind, name string, opts []LockOption) *Once {
	k := scripts.NewOnceKeys(c.lockKey(kind, name))
	o := &Once{err: checkName(name), info: Lock{Kind: KindOnce, Name: name, N: 1}}
	o.runRecord = runRecord{c: c, name: name, info: &o.info, lc: newLockConfig(opts), state: k.State, run: k.Run, ch: k.Channel,
		begin: func(owner, lease, call string) scripts.Call { return scripts.OnceBeginCall(k, owner, lease, call) },
		end:   func(mark, outcome, val string) scripts.Call { return scripts.OnceEndCall(k, mark, outcome, val) },
		undo:  func(call, remember string) scripts.Call { return scripts.OnceUndoCall(k, call, remember) }}
	return o
}

// Do calls f if and only if no call of f for this name has succeeded yet, in
// any process, and no other call is running; if one is running, Do waits for
// it and returns nil if it succeeded, or runs f itself if it failed. Do
// returns f's error; if f panics, Do panics with the same value.
//
// f's context is a lock context, carrying the run's fencing token and
// cancelled with cause ErrLockLost if the run's lease is lost; Do then
// returns an error matching ErrLockLost, or nil if another run has
// succeeded. If the run's lease has run out before f can start (the
// process was paused or starved, or the reply that started the run came
// back later than the lease), another run may have begun, and succeeded,
// since: f is not run, and Do returns an error matching ErrLockLost, or
// nil if another run has succeeded. If recording f's outcome finds that the
// lease lapsed and another run began, f's context is cancelled with cause
// ErrLockLost before Do returns. f's outcome is recorded even if ctx ended
// while f ran. Calling Do from inside f with f's context returns
// ErrInvalidArgument.
func (o *Once) Do(ctx context.Context, f func(context.Context) error) error {
	if f == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	_, err := o.do(ctx, func(ctx context.Context) (string, error) { return "", f(ctx) })
	return err
}

// OnceValue returns a function that calls f at most once successfully per
// name across all processes and returns its result, which every process
// gets: it is stored in Redis as JSON, so T must survive encoding/json. A
// failed call returns f's error and lets the next call try again.
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
		return "", wrapErr(KindOnce, o.name, err)
	}
	if ctx.Value(onceRunKey{o.state}) != nil {
		return "", fmt.Errorf("%w: Once %q: Do called from inside its own f", ErrInvalidArgument, shortName(o.name))
	}
	ctx, owner := ownerFrom(ctx, c.cfg.name)
	ctx, ob := c.observe(ctx, o.info, owner, false)
	// The call id names this Do call's run, for its exact undo. The wait
	// is a call Close waits for; f, which may run long, is not.
	if err := c.enter(); err != nil {
		ob.done(nil, false, 0, err)
		return "", err
	}
	w, err := o.wait(ctx, owner, c.attemptID())
	ob.done(w.h, false, w.attempts, err)
	if w.h == nil {
		c.exit()
		return w.val, wrapErr(KindOnce, o.name, err)
	}
	claimed := o.claim(ctx, w)
	c.exit()
	if !claimed {
		return "", wrapErr(KindOnce, o.name, ErrClosed)
	}
	e := o.runF(ctx, w, onceRunKey{o.state}, f, func(error) (string, string) { return "fail", "" })
	switch {
	case e.err != nil:
		return "", e.err
	case e.endErr != nil:
		return "", wrapErr(KindOnce, o.name, e.endErr)
	case e.code == 1:
		return e.val, nil
	case e.code == 2:
		return e.stored, nil
	}
	return "", fmt.Errorf("dsync: Once %q: the run lost its lease to another run, its result was discarded: %w", shortName(o.name), ErrLockLost)
}

// onceRunKey marks the context a run passes to f, so that a Do through it
// (one inside f) is told apart from a concurrent Do of the same owner. The
// state key names the Once across Clients of one prefix.
type onceRunKey struct{ state string }
