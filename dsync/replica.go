package dsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// DefaultReplicaSyncTimeout is how long WithReplicaSync waits for replicas
// when given no timeout.
const DefaultReplicaSyncTimeout = time.Second

// ErrNotReplicated is returned by an acquisition made with WithReplicaSync
// that fewer replicas than asked acknowledged in time. The acquisition has
// been undone.
var ErrNotReplicated = errors.New("dsync: acquisition not acknowledged by enough replicas")

// WithReplicaSync makes each acquisition of a Mutex, FairMutex, RWMutex
// (both modes) or Semaphore wait until n replicas of the master
// acknowledged it (Redis WAIT), at most timeout (DefaultReplicaSyncTimeout
// if timeout <= 0). If fewer did, the acquisition is released again and
// fails with ErrNotReplicated. n <= 0 turns it off. Once ignores it: its
// run lock is held only while f runs, and a second run after a failover is
// what its result record, not WAIT, has to prevent.
//
// It narrows one hole: a failover that promotes a replica which never saw
// the acquisition, so that a second owner gets the lock. It cannot close
// it: WAIT does not make the write durable (a replica may restart and lose
// it, or the replica that acknowledged may not be the one promoted), it
// does not cover renewals, releases or in-process handoffs (see
// WithMaxLocalHandoffs), and it costs a dedicated connection and a
// replication round trip per acquisition. See docs/scale-out.md.
func WithReplicaSync(n int, timeout time.Duration) LockOption {
	return func(c *lockConfig) {
		c.replicas = max(n, 0)
		if timeout <= 0 {
			timeout = DefaultReplicaSyncTimeout
		}
		c.replicaTimeout = timeout
	}
}

// execAcquire runs an acquire script, whose reply is {code, value} with a
// code other than 0 when it acquired. With WithReplicaSync it is followed
// by WAIT on the same connection, since WAIT counts only the writes of its
// own connection. When the script acquired but too few replicas
// acknowledged, or WAIT's reply is missing, it returns the script's reply
// with an error wrapping ErrNotReplicated, which is not a Redis error: the
// caller must undo the acquisition.
func (c *Client) execAcquire(ctx context.Context, lc *lockConfig, l *rueidis.Lua, keys, args []string) ([]int64, error) {
	return c.execAcquireInto(ctx, lc, l, keys, args, nil)
}

// execAcquireInto is execAcquire appending the reply to dst, so that a
// caller with room for it allocates nothing for the reply.
func (c *Client) execAcquireInto(ctx context.Context, lc *lockConfig, l *rueidis.Lua, keys, args []string, dst []int64) ([]int64, error) {
	l = c.lua(l)
	if lc.replicas == 0 {
		return appendInts(dst, l.Exec(ctx, c.rc, keys, args))
	}
	sha, _ := scripts.SHA1(l)
	var vals []int64
	var acks int64
	err := c.rc.Dedicated(func(dc rueidis.DedicatedClient) error {
		wait := func() rueidis.Completed {
			return dc.B().Wait().Numreplicas(int64(lc.replicas)).Timeout(lc.replicaTimeout.Milliseconds()).Build()
		}
		res := dc.DoMulti(ctx, dc.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		if err := res[0].Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			eval := dc.B().Eval().Script(scripts.Source(l)).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
			res = dc.DoMulti(ctx, eval, wait())
		}
		var err error
		if vals, err = appendInts(dst, res[0]); err != nil {
			vals = nil
			return err
		}
		acks, err = res[1].AsInt64()
		return err
	})
	acquired := len(vals) == 2 && vals[0] > 0
	switch {
	case err != nil && acquired:
		return vals, fmt.Errorf("%w: %v", ErrNotReplicated, err)
	case err != nil:
		return nil, err
	case acquired && acks < int64(lc.replicas):
		return vals, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acks, lc.replicas, lc.replicaTimeout)
	}
	return vals, nil
}

// appendInts appends an array reply of integers to dst (AsIntSlice without
// its allocation when dst has room). A bare integer n, an acquire script's
// reply for "acquired with token n" (mutex_acquire.lua: the cheapest reply
// to build and to read), appends {1, n}.
func appendInts(dst []int64, r rueidis.RedisResult) ([]int64, error) {
	msg, err := r.ToMessage()
	if err != nil {
		return nil, err
	}
	if msg.IsInt64() {
		n, _ := msg.AsInt64()
		return append(dst, 1, n), nil
	}
	arr, err := msg.ToArray()
	if err != nil {
		return nil, err
	}
	for _, v := range arr {
		n, err := v.AsInt64()
		if err != nil {
			return nil, err
		}
		dst = append(dst, n)
	}
	return dst, nil
}
