package dsync

import (
	"errors"
	"time"
)

// DefaultReplicaSyncTimeout is how long WithReplicaSync waits by default.
const DefaultReplicaSyncTimeout = time.Second

// ErrNotReplicated is returned by an acquisition made with WithReplicaSync
// that fewer replicas than asked acknowledged in time. The acquisition has
// been undone.
var ErrNotReplicated = errors.New("dsync: acquisition not acknowledged by enough replicas")

// WithReplicaSync makes each acquisition of a Mutex, FairMutex, RWMutex or
// Semaphore wait until n replicas acknowledged it (Redis WAIT), at most
// timeout (DefaultReplicaSyncTimeout if timeout <= 0); if fewer did, it is
// undone and fails with ErrNotReplicated. n <= 0 turns it off. It narrows
// the hole a failover leaves, and cannot close it: see docs/scale-out.md.
func WithReplicaSync(n int, timeout time.Duration) LockOption {
	return func(c *lockConfig) {
		c.replicas = max(n, 0)
		if timeout <= 0 {
			timeout = DefaultReplicaSyncTimeout
		}
		c.replicaTimeout = timeout
	}
}
