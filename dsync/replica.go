package dsync

import (
	"errors"
	"time"
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
