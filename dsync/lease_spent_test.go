package dsync_test

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// No acquisition returns a lock context that is already cancelled (issue
// 24, point 3). An acquisition whose reply comes back after its whole
// fixed lease (here its command is held 150 ms on the way to Redis, the
// lease is 50 ms) holds a lock whose lease has run out on the local clock:
// before, LockContext returned it with a nil error and its lock context
// cancelled (ErrLockLost); now it releases it and fails with an
// ErrLockLost that says to use a longer lease (Lock retries it).
func TestAcquisitionPastItsLease(t *testing.T) {
	rows := map[string]bool{"Mutex": true, "FairMutex": true, "RWMutexWrite": true, "RWMutexRead": true, "Semaphore1": true}
	for _, row := range contractRows() {
		if !rows[row.name] {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			p := newDelayProxy(t, server(t).Addr)
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rc.Close)
			c := newClientOn(t, rc, dsync.WithKeyPrefix(testPrefix(t)), dsync.WithLease(3*time.Second))
			// Connections and scripts ready, through a handle of the same
			// lock whose lease outlasts a round trip on a loaded machine
			// (with both CPUs busy one took 55 ms, past 50 ms).
			warm := row.open(c, "spent", dsync.WithLeaseTime(5*time.Second))
			lctx, err := warm.lock(ctxT(t)) // no delay
			require.NoError(t, err)
			require.NoError(t, warm.unlock(lctx))
			l := row.open(c, "spent", dsync.WithLeaseTime(50*time.Millisecond))

			p.delay.Store(int64(150 * time.Millisecond)) // the fault
			lctx, err = l.lock(ctxT(t))
			p.delay.Store(0)
			if err == nil {
				require.NoError(t, lctx.Err(), "the acquisition returned nil with its lock context cancelled")
				require.NoError(t, l.unlock(lctx))
				t.Fatal("an acquisition whose reply came 150 ms after it was sent returned a 50 ms lease")
			}
			require.ErrorIs(t, err, dsync.ErrLockLost)
			require.True(t, strings.Contains(err.Error(), "spent") && strings.Contains(err.Error(), "use a longer lease"), "error %q: want the lock's name and what to do", err)
		})
	}
}

// delayProxy forwards connections to a Redis server, holding what clients
// send for delay (0: not at all) before passing it on.
type delayProxy struct {
	addr  string
	delay atomic.Int64
}

func newDelayProxy(t *testing.T, target string) *delayProxy {
	p := &delayProxy{}
	p.addr = serveProxy(t, target, func(in, out net.Conn) func() {
		return func() {
			defer out.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if err != nil {
					return
				}
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d) // the fault: the command is late to Redis
				}
				if _, err := out.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	})
	return p
}
