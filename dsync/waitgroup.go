package dsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A WaitGroup waits for a collection of tasks, in any processes, to finish:
// the cross-process counterpart of sync.WaitGroup. When the counter reaches
// zero, every Wait that saw it above zero returns, even if an Add raises it
// again first. The counter has no lease: a task whose process dies before
// Done leaves it above zero; bound Wait with its context.
//
// A WaitGroup is safe for concurrent use. Its zero value is not usable;
// create WaitGroups with Client.NewWaitGroup. A WaitGroup may be copied.
type WaitGroup struct {
	c    *Client
	name string
	key  string // the counter; absent means zero
	gen  string // the generation: server µs when the counter left zero
	ch   string // published when the counter reaches zero
	err  error
}

// NewWaitGroup returns the WaitGroup called name. An invalid name makes
// every call fail with ErrInvalidArgument.
func (c *Client) NewWaitGroup(name string) *WaitGroup {
	key := c.lockKey("wg", name)
	return &WaitGroup{c: c, name: name, key: key, gen: key + ":gen", ch: key + ":ch", err: checkName(name)}
}

// Add adds delta, which may be negative, to the counter. If the counter
// would go negative or overflow, Add returns an error matching
// ErrInvalidArgument and leaves the counter unchanged (sync.WaitGroup panics
// instead). After a Redis error it is unknown whether delta was applied: Add
// is not retried.
func (wg *WaitGroup) Add(ctx context.Context, delta int64) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return err
	}
	vals, err := c.run(ctx, scripts.WaitGroupAddCall(wg.key, wg.ch, wg.gen, delta)).AsIntSlice()
	r, ok := decodeWGAdd(vals)
	if err == nil && !ok {
		err = errors.New("dsync: unexpected reply from the wait group script")
	}
	if err != nil {
		const why = "it is unknown whether the delta was applied: Add is not idempotent, so do not simply add it again"
		if ctxErr(ctx) == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			// A timeout of rueidis' own (Redis stalled), not ctx's.
			err = fmt.Errorf("%w; %s", ownErr(err), why)
		}
		return wrapErr(KindWaitGroup, wg.name, notIdempotent(err, why))
	}
	switch r.code {
	case wgAddApplied:
		return nil
	case wgAddNegative:
		return fmt.Errorf("%w: WaitGroup %q: adding %d to counter %d would make it negative", ErrInvalidArgument, shortName(wg.name), delta, r.counter)
	case wgAddOverflow:
		return fmt.Errorf("%w: WaitGroup %q: adding %d to counter %d leaves the int64 range", ErrInvalidArgument, shortName(wg.name), delta, r.counter)
	}
	return nil
}

// wgAddCode is the code wg_add.lua's reply, {code, counter}, starts with.
type wgAddCode int64

const (
	// wgAddOverflow: {-1, counter}, the sum is outside int64; nothing
	// changed.
	wgAddOverflow wgAddCode = -1
	// wgAddNegative: {0, counter}, the counter would go negative; nothing
	// changed.
	wgAddNegative wgAddCode = 0
	// wgAddApplied: {1, counter}, applied; counter is the new one.
	wgAddApplied wgAddCode = 1
)

// wgAddReply is wg_add.lua's reply, decoded.
type wgAddReply struct {
	code    wgAddCode
	counter int64
}

// decodeWGAdd decodes wg_add.lua's reply; ok is false unless it has two
// values.
func decodeWGAdd(vals []int64) (r wgAddReply, ok bool) {
	if len(vals) != 2 {
		return r, false
	}
	return wgAddReply{code: wgAddCode(vals[0]), counter: vals[1]}, true
}

// Done decrements the counter by one.
func (wg *WaitGroup) Done(ctx context.Context) error {
	return wg.Add(ctx, -1)
}

// Go calls f in a new goroutine and adds that task to the WaitGroup, as
// sync.WaitGroup.Go does: Add(ctx, 1), and Done when f returns. If the Add
// fails, Go returns its error and does not call f. The Done runs under ctx
// without its cancellation; if it fails, the counter stays up (as after a
// process that died) and the Client's logger says so. f must not panic: a
// panic is not recovered and sends no Done. Close does not wait for f.
func (wg *WaitGroup) Go(ctx context.Context, f func()) error {
	if f == nil {
		return fmt.Errorf("%w: WaitGroup %q: Go needs a function", ErrInvalidArgument, shortName(wg.name))
	}
	if err := wg.Add(ctx, 1); err != nil {
		return err
	}
	go func() {
		defer func() {
			if x := recover(); x != nil {
				panic(x) // fatal in a goroutine: no Done for Wait to race with
			}
			if err := wg.Done(context.WithoutCancel(ctx)); err != nil {
				wg.c.cfg.logger.Warn("dsync: WaitGroup.Go: Done failed, the counter stays up", "kind", KindWaitGroup, "name", shortName(wg.name), "err", err)
			}
		}()
		f()
	}()
	return nil
}

// Wait blocks until the counter is zero, or has been zero since Wait saw it
// above zero, or ctx is done.
func (wg *WaitGroup) Wait(ctx context.Context) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return wrapErr(KindWaitGroup, wg.name, err)
	}
	_, err := waitLoop(c, ctx, wg.ch, "", false, wgWait{wg: wg, observed: new(string)})
	return wrapErr(KindWaitGroup, wg.name, err)
}

// wgWait is a Wait's waitProto: an attempt looks at the counter and its
// generation (a read: nothing to undo). The wait is over when the counter
// is zero, or the generation the first look observed has ended (the
// counter reached zero since, and an Add raised it again).
type wgWait struct {
	wg       *WaitGroup
	observed *string // the generation this Wait belongs to ("" before the first look)
}

func (w wgWait) attempt(ctx context.Context, n int) (bool, time.Duration, error) {
	wg, c := w.wg, w.wg.c
	// Bounded always, not only when the Client is in doubt
	// (Client.inDoubt): rueidis may make the look wait for a connection
	// another call is opening again, whatever ctx, also when no call
	// failed before (rueidis saw the connection break by itself). A look
	// is a read: a reply that comes after the Wait has gone is dropped. It
	// costs a goroutine per look, and a Wait looks once (it subscribes
	// first: see subscriber), then once per message or lease/3.
	vals, err := bounded(c, ctx, func(ctx context.Context) ([]rueidis.RedisMessage, error) {
		return c.rc.Do(ctx, c.rc.B().Mget().Key(wg.key, wg.gen).Build()).ToArray()
	})
	if err == nil && len(vals) != 2 {
		err = errors.New("dsync: unexpected reply to MGET")
	}
	if err != nil {
		return true, 0, err
	}
	zero, gen := decodeWGLook(vals)
	if zero {
		return true, 0, nil
	}
	if n == 1 {
		*w.observed = gen
		if f := c.cfg.test.waitGroupObserved; f != nil {
			f()
		}
	} else if gen != *w.observed {
		return true, 0, nil // the generation observed ended; this is another
	}
	// No hint (-1): the fallback look is lease/3 away. (A hint of 0 would
	// mean "look again at once": a look every millisecond.)
	return false, -1, nil
}

// decodeWGLook decodes a look's reply (MGET of the counter and the
// generation): whether the counter is zero (missing, or not above zero),
// and the generation ("" if missing).
func decodeWGLook(vals []rueidis.RedisMessage) (zero bool, gen string) {
	cnt, err := vals[0].AsInt64()
	if rueidis.IsRedisNil(err) || (err == nil && cnt <= 0) {
		return true, ""
	}
	gen, _ = vals[1].ToString()
	return false, gen
}

func (wgWait) failed(error) {} // a look changes nothing

func (wgWait) subscribeFirst() {}

func (wgWait) waiting() {}

func (wgWait) gaveUp() {}

func (wgWait) granted(uint64, uint64) bool { return false } // the channel carries no grants
