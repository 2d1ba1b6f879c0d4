package dsync_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wait returns by its context while another call of its Client is
// opening the connection again after it broke: rueidis makes a call that
// needs the connection wait for that dial and handshake whatever the
// waiting call's own context (here the handshake is held 1.5 s, as an
// unreachable or overloaded server would hold it). The connection breaks
// under a call in flight, which fails (as under a reset or a timeout):
// that failure is what puts the Client's calls in doubt, so that they run
// bounded (Client.inDoubt). For the Mutex (and the MultiLock of Mutexes),
// Once and WaitGroup, whose calls otherwise run inline; the FairMutex,
// RWMutex and Semaphore run every attempt bounded.
func TestWaitNotBehindAnotherCallsDial(t *testing.T) {
	for _, tc := range []struct {
		kind string
		wait func(c *dsync.Client, ctx context.Context) error
	}{
		{"Mutex", func(c *dsync.Client, ctx context.Context) error {
			_, err := c.NewMutex("a").LockContext(ctx)
			return err
		}},
		{"Once", func(c *dsync.Client, ctx context.Context) error {
			return c.NewOnce("a").Do(ctx, func(context.Context) error { return nil })
		}},
		{"WaitGroup", func(c *dsync.Client, ctx context.Context) error { return c.NewWaitGroup("a").Wait(ctx) }},
	} {
		t.Run(tc.kind, func(t *testing.T) { waitBehindDial(t, tc.wait) })
	}
}

func waitBehindDial(t *testing.T, wait func(c *dsync.Client, ctx context.Context) error) {
	p := newStallProxy(t, server(t).Addr)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true,
		PipelineMultiplex: -1}) // one connection: every call needs the one being opened
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	// A lease longer than the held dial: the other call's acquisition,
	// sent before the dial and answered after it, is not lost on arrival.
	c := newClientOn(t, rc, dsync.WithKeyPrefix(testPrefix(t)), dsync.WithLease(3*time.Second))
	lctx, err := c.NewMutex("warm").LockContext(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, c.NewMutex("warm").UnlockContext(lctx))
	waitPreloaded(t, c) // its connection of its own is not the one held

	// Another call, with seconds to wait, is in flight when the
	// connection breaks; it opens the connection again.
	p.freeze()
	other := make(chan error, 1)
	go func() {
		octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		for octx.Err() == nil { // its first try fails with the connection
			var l context.Context
			if l, err = c.NewMutex("dialer").LockContext(octx); err == nil {
				err = c.NewMutex("dialer").UnlockContext(l)
				break
			}
		}
		other <- err
	}()
	select {
	case <-p.swallowed:
	case <-time.After(5 * time.Second):
		t.Fatal("the other call was not sent")
	}
	p.cut(1500 * time.Millisecond)
	select {
	case <-p.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection was opened again")
	}
	// The connection held may be the pub/sub one, opened again by rueidis
	// itself: wait until the other call has failed on the cut connection
	// (the case this test is about; a dial that follows no failed call is
	// not covered, see Client.inDoubt).
	waitFor(t, time.Second, "the other call's failure on the cut connection", func() bool { return dsync.InDoubt(c) })
	// The wait, with 50 ms to wait, while the dial is held. (Under load
	// it may first meet the broken connection itself and fail at once
	// with its error: then it waits again.)
	heldUntil := time.Now().Add(time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err = wait(c, ctx)
		took := time.Since(start)
		cancel()
		assert.Less(t, took, 50*time.Millisecond+100*time.Millisecond, "the wait returned %v after its 50 ms deadline (%v)", took-50*time.Millisecond, err)
		if errors.Is(err, context.DeadlineExceeded) || time.Now().After(heldUntil) {
			break
		}
		t.Logf("the wait failed at once: %v", err)
	}
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-other)
	// The connection is back: the lock is free (the late attempt, if it
	// ran, was undone).
	m := c.NewMutex("a")
	waitFor(t, 5*time.Second, "the Mutex free", func() bool {
		l, ok, err := m.TryLockContext(ctxT(t))
		if ok {
			require.NoError(t, m.UnlockContext(l))
		}
		return err == nil && ok
	})
}

// stallProxy forwards connections to a Redis server. freeze swallows what
// clients send (swallowed says when a command on the lock "dialer" was);
// cut closes every connection and holds the first bytes of
// those opened after it for a while.
type stallProxy struct {
	addr      string
	swallowed chan struct{} // closed when a command on "dialer" was swallowed
	held      chan struct{} // closed when a connection's first bytes are held
	nheld     atomic.Int32  // how many connections' first bytes were held
	mu        sync.Mutex
	conns     []net.Conn
	frozen    bool
	until     time.Time // hold new connections' first bytes until then
	sw, hd    sync.Once
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	p := &stallProxy{swallowed: make(chan struct{}), held: make(chan struct{})}
	p.addr = serveProxy(t, target, func(in, out net.Conn) func() {
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		until := p.until
		p.mu.Unlock()
		return func() {
			defer out.Close()
			if d := time.Until(until); d > 0 {
				p.nheld.Add(1)
				p.hd.Do(func() { close(p.held) })
				time.Sleep(d) // the handshake held
			}
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if err != nil {
					return
				}
				p.mu.Lock()
				frozen := p.frozen
				p.mu.Unlock()
				if frozen {
					if bytes.Contains(buf[:n], []byte("dialer")) {
						p.sw.Do(func() { close(p.swallowed) })
					}
					continue
				}
				if _, err := out.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	})
	return p
}

func (p *stallProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *stallProxy) cut(hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	p.until = time.Now().Add(hold)
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
