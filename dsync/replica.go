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

// WithReplicaSync makes each acquisition of a Mutex wait until n replicas
// of the master acknowledged it (Redis WAIT), at most timeout
// (DefaultReplicaSyncTimeout if timeout <= 0). If fewer did, the
// acquisition is released again and fails with ErrNotReplicated. n <= 0
// turns it off.
//
// It narrows one hole: a failover that promotes a replica which never saw
// the acquisition, so that a second owner gets the lock. It cannot close
// it: WAIT does not make the write durable (a replica may restart and lose
// it, or the replica that acknowledged may not be the one promoted), it
// does not cover renewals or in-process handoffs (see
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

// execAcquire runs the acquire script; with WithReplicaSync it is followed
// by WAIT on the same connection, since WAIT counts only the writes of its
// own connection. A failed WAIT after a successful acquire returns an error
// that is not a Redis error, so the caller undoes the acquisition.
func (m *Mutex) execAcquire(ctx context.Context, args []string) ([]int64, error) {
	if m.lc.replicas == 0 {
		return scripts.MutexAcquire.Exec(ctx, m.c.rc, m.keys, args).AsIntSlice()
	}
	var vals []int64
	var acks int64
	err := m.c.rc.Dedicated(func(dc rueidis.DedicatedClient) error {
		wait := dc.B().Wait().Numreplicas(int64(m.lc.replicas)).Timeout(m.lc.replicaTimeout.Milliseconds()).Build()
		eval := dc.B().Evalsha().Sha1(scripts.MutexAcquireSHA).Numkeys(int64(len(m.keys))).Key(m.keys...).Arg(args...).Build()
		res := dc.DoMulti(ctx, eval, wait)
		if err := res[0].Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			eval = dc.B().Eval().Script(scripts.MutexAcquireSource).Numkeys(int64(len(m.keys))).Key(m.keys...).Arg(args...).Build()
			wait = dc.B().Wait().Numreplicas(int64(m.lc.replicas)).Timeout(m.lc.replicaTimeout.Milliseconds()).Build()
			res = dc.DoMulti(ctx, eval, wait)
		}
		var err error
		if vals, err = res[0].AsIntSlice(); err != nil {
			return err
		}
		acks, err = res[1].AsInt64()
		return err
	})
	if err != nil {
		if vals != nil && vals[0] != 0 {
			// Acquired, but WAIT's reply is missing: not known to be synced.
			return nil, fmt.Errorf("%w: %v", ErrNotReplicated, err)
		}
		return nil, err
	}
	if len(vals) == 2 && vals[0] != 0 && acks < int64(m.lc.replicas) {
		return nil, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acks, m.lc.replicas, m.lc.replicaTimeout)
	}
	return vals, nil
}
