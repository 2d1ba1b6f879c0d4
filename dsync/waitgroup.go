package dsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A WaitGroup waits for a collection of tasks, in any processes, to finish:
// the cross-process counterpart of sync.WaitGroup (Redisson's
// CountDownLatch). Its counter lives in Redis under the key prefix and
// name, so every Client using them shares it.
//
// Wait follows sync.WaitGroup's generations: a Wait belongs to the
// generation it observed (a stretch of the counter above zero), and when
// the counter reaches zero that generation ends and every Wait of it
// returns nil, even if an Add raises the counter again before the waiter
// has looked. The counter is an exact int64.
//
// The counter has no lease: a task whose process dies before Done leaves it
// above zero, as a goroutine that never calls Done would; bound Wait with
// its context.
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

// Add adds delta, which may be negative, to the counter. When the counter
// reaches zero, every Wait in progress returns. If the counter would go
// negative, or out of the int64 range, Add returns an error that errors.Is
// ErrInvalidArgument and leaves the counter unchanged (sync.WaitGroup
// panics instead).
//
// Add is not retried after a lost reply, since it is not idempotent: a
// Redis error leaves it unknown whether delta was applied.
func (wg *WaitGroup) Add(ctx context.Context, delta int64) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return err
	}
	vals, err := c.lua(scripts.WaitGroupAdd).Exec(ctx, c.rc, []string{wg.key, wg.ch, wg.gen}, []string{strconv.FormatInt(delta, 10)}).AsIntSlice()
	if err == nil && len(vals) != 2 {
		err = errors.New("dsync: unexpected reply from the wait group script")
	}
	if err != nil {
		return wrapErr(KindWaitGroup, wg.name, err)
	}
	switch vals[0] {
	case 0:
		return fmt.Errorf("%w: WaitGroup %q: adding %d to counter %d would make it negative", ErrInvalidArgument, shortName(wg.name), delta, vals[1])
	case -1:
		return fmt.Errorf("%w: WaitGroup %q: adding %d to counter %d leaves the int64 range", ErrInvalidArgument, shortName(wg.name), delta, vals[1])
	}
	return nil
}

// Done decrements the counter by one.
func (wg *WaitGroup) Done(ctx context.Context) error {
	return wg.Add(ctx, -1)
}

// Wait blocks until the counter is zero, or the generation it observed has
// ended (the counter reached zero since, see WaitGroup), or ctx is done. It
// is woken by a message when the counter reaches zero and, in case the
// message is lost, looks again at least every lease/3 of the Client. A
// wait ended by ctx returns an error for which errors.Is(err, ctx.Err())
// holds.
func (wg *WaitGroup) Wait(ctx context.Context) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return wrapErr(KindWaitGroup, wg.name, err)
	}
	w := wakeup{c: c, ch: wg.ch}
	defer w.close()
	var observed string // the generation this Wait belongs to
	for attempt := 1; ; attempt++ {
		// Subscribe before looking, so reaching zero after the look is
		// not missed.
		w.subscribe(ctx)
		w.drain()
		look := func(ctx context.Context) ([]rueidis.RedisMessage, error) {
			return c.rc.Do(ctx, c.rc.B().Mget().Key(wg.key, wg.gen).Build()).ToArray()
		}
		var vals []rueidis.RedisMessage
		var err error
		if c.inDoubt(ctx) {
			vals, err = bounded(c, ctx, look)
		} else {
			vals, err = look(ctx)
		}
		if err == nil && len(vals) != 2 {
			err = errors.New("dsync: unexpected reply to MGET")
		}
		if err != nil {
			if ctx.Err() != nil {
				return wrapErr(KindWaitGroup, wg.name, ctx.Err())
			}
			if c.closed.Load() {
				return ErrClosed
			}
			return wrapErr(KindWaitGroup, wg.name, err)
		}
		n, err := vals[0].AsInt64()
		if rueidis.IsRedisNil(err) || (err == nil && n <= 0) {
			return nil // zero
		}
		gen, _ := vals[1].ToString()
		if attempt == 1 {
			observed = gen
			if f := c.cfg.test.waitGroupObserved; f != nil {
				f()
			}
		} else if gen != observed {
			return nil // the generation observed ended; this is another
		}
		if err := w.wait(ctx, 0, attempt); err != nil {
			return wrapErr(KindWaitGroup, wg.name, err)
		}
	}
}
