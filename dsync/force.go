package dsync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// ForceUnlock releases every primitive called name, whoever holds it, and
// wakes its waiters; a running Once or Group run's result is not recorded, a
// WaitGroup's counter is reset to zero. It is the last resort for a holder
// that is stuck but still renewing. Holders are told at once, their lock
// contexts cancelled with ErrLockLost; one that cannot be told learns it at
// its next renewal (fixed leases: at their end) and may act as holder
// meanwhile, so only fencing protects the data. It returns the primitives it
// released.
func (c *Client) ForceUnlock(ctx context.Context, name string) ([]LockRef, error) {
	out, err := c.forceUnlock(ctx, name)
	if len(out) > 0 {
		if _, perr := c.tellForced(ctx, name, "-"); perr != nil && err == nil {
			err = wrapErr(out[0].Kind, name, perr)
		}
	}
	return out, err
}

// ForceUnlockTell is ForceUnlock, and also returns the holders whose Client
// answered, within a second, that it cancelled their lock contexts.
func (c *Client) ForceUnlockTell(ctx context.Context, name string) (released []LockRef, told []ToldHolder, err error) {
	out, err := c.forceUnlock(ctx, name)
	if len(out) == 0 {
		return out, nil, err
	}
	reply := c.cfg.prefix + ":force:" + c.attemptID()
	n, perr := c.tellForced(ctx, name, reply)
	if perr != nil {
		if err == nil {
			err = wrapErr(out[0].Kind, name, perr)
		}
		return out, nil, err
	}
	told, aerr := c.forceAnswers(ctx, reply, n)
	if err == nil {
		err = aerr
	}
	return out, told, err
}

// forceAnswers collects n answers on the list reply (see forced), until
// forceAnswerWait has passed or ctx ends, and returns the holders they name.
func (c *Client) forceAnswers(ctx context.Context, reply string, n int64) ([]ToldHolder, error) {
	defer c.background(func(ctx context.Context) {
		_ = c.rc.Do(ctx, c.rc.B().Del().Key(reply).Build()).Error()
	})
	var told []ToldHolder
	deadline := time.Now().Add(forceAnswerWait)
	for got := int64(0); got < n; got++ {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			break
		}
		kv, err := c.rc.Do(ctx, c.rc.B().Blpop().Key(reply).Timeout(left.Seconds()).Build()).AsStrSlice()
		if rueidis.IsRedisNil(err) {
			break // timed out
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return told, fmt.Errorf("dsync: waiting for the holders' answers to a forced release: %w", err)
		}
		if len(kv) != 2 {
			continue
		}
		lines := strings.Split(kv[1], "\n")
		for _, l := range lines[1:] {
			kind, rest, _ := strings.Cut(l, " ")
			qowner, err := strconv.QuotedPrefix(rest)
			if err != nil {
				continue
			}
			owner, _ := strconv.Unquote(qowner)
			rest = strings.TrimPrefix(rest[len(qowner):], " ")
			qname, err := strconv.QuotedPrefix(rest)
			if err != nil {
				continue
			}
			name, _ := strconv.Unquote(qname)
			locker := strings.TrimSpace(rest[len(qname):]) == "locker"
			told = append(told, ToldHolder{Kind: Kind(kind), Name: name, Owner: owner, Client: lines[0], Locker: locker})
		}
	}
	return told, nil
}

// forceUnlock is ForceUnlock without telling the holders.
func (c *Client) forceUnlock(ctx context.Context, name string) ([]LockRef, error) {
	if err := c.checkCall(ctx, checkName(name)); err != nil {
		return nil, err
	}
	var out []LockRef
	for _, l := range inspectable {
		x := scripts.ForceUnlockCall(c.lockKey(l.part, name), l.queue, leaseMS(freeMarkerTTL))
		owner, err := c.run(ctx, x).ToString()
		if err != nil {
			return out, wrapErr(l.kind, name, err)
		}
		if owner != "" {
			out = append(out, LockRef{Kind: l.kind, Name: name})
		}
	}
	for _, f := range []struct {
		kind Kind
		call scripts.Call
	}{
		{KindRWMutex, scripts.ForceRWCall(c.lockKey("rw", name))},
		{KindSemaphore, scripts.ForceSemCall(c.lockKey("sem", name))},
		{KindOnce, scripts.ForceOtherCall("once", c.lockKey("once", name))},
		{KindOnce, scripts.ForceOtherCall("once", c.lockKey("oncevalue", name))},
		{KindWaitGroup, scripts.ForceOtherCall("wg", c.lockKey("wg", name))},
	} {
		got, err := c.run(ctx, f.call).AsStrSlice()
		if err != nil {
			return out, wrapErr(f.kind, name, err)
		}
		if len(got) > 0 {
			out = append(out, LockRef{Kind: f.kind, Name: name})
		}
	}
	if ok, err := c.forceElection(ctx, name); err != nil {
		return out, err
	} else if ok {
		out = append(out, LockRef{Kind: KindElection, Name: name})
	}
	if ok, err := c.forceGroup(ctx, name); err != nil {
		return out, err
	} else if ok {
		out = append(out, LockRef{Kind: KindGroup, Name: name})
	}
	return out, nil
}
