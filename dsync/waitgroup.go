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
	ch   string // published when the counter reaches zero
	err  error
}

// NewWaitGroup returns the WaitGroup called name. An invalid name makes
// every call fail with ErrInvalidArgument.
func (c *Client) NewWaitGroup(name string) *WaitGroup {
	key := c.lockKey("wg", name)
	return &WaitGroup{c: c, name: name, key: key, ch: key + ":ch", err: checkName(name)}
}

// Add adds delta, which may be negative, to the counter. When the counter
// reaches zero, every Wait in progress returns. If the counter would go
// negative, Add returns an error that errors.Is ErrInvalidArgument and
// leaves the counter unchanged (sync.WaitGroup panics instead).
//
// Add is not retried after a lost reply, since it is not idempotent: a
// Redis error leaves it unknown whether delta was applied.
func (wg *WaitGroup) Add(ctx context.Context, delta int64) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return err
	}
	vals, err := c.lua(scripts.WaitGroupAdd).Exec(ctx, c.rc, []string{wg.key, wg.ch}, []string{strconv.FormatInt(delta, 10)}).AsIntSlice()
	if err == nil && len(vals) != 2 {
		err = errors.New("dsync: unexpected reply from the wait group script")
	}
	if err != nil {
		return wrapErr(KindWaitGroup, wg.name, err)
	}
	if vals[0] == 0 {
		return fmt.Errorf("%w: WaitGroup %q: adding %d to counter %d would make it negative", ErrInvalidArgument, shortName(wg.name), delta, vals[1])
	}
	return nil
}

// Done decrements the counter by one.
func (wg *WaitGroup) Done(ctx context.Context) error {
	return wg.Add(ctx, -1)
}

// Wait blocks until the counter is zero or ctx is done. It is woken by a
// message when the counter reaches zero and, in case the message is lost,
// looks again at least every lease/3 of the Client. A wait ended by ctx
// returns an error for which errors.Is(err, ctx.Err()) holds.
func (wg *WaitGroup) Wait(ctx context.Context) error {
	c := wg.c
	if err := c.checkCall(ctx, wg.err); err != nil {
		return err
	}
	w := wakeup{c: c, ch: wg.ch}
	defer w.close()
	for attempt := 1; ; attempt++ {
		// Subscribe before looking, so reaching zero after the look is
		// not missed.
		w.subscribe(ctx)
		w.drain()
		n, err := c.rc.Do(ctx, c.rc.B().Get().Key(wg.key).Build()).AsInt64()
		switch {
		case rueidis.IsRedisNil(err):
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if c.closed.Load() {
				return ErrClosed
			}
			return wrapErr(KindWaitGroup, wg.name, err)
		case n <= 0:
			return nil
		}
		if err := w.wait(ctx, 0, attempt); err != nil {
			return err
		}
	}
}
