package dsync_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A Semaphore Release whose reply is lost, its context ending while the
// release is on its way (a process frozen by SIGSTOP in the call, past
// the context's deadline: the fault suite's scenario 1 with the
// Semaphore's stops past the lease, "chaos worker: release: dsync:
// semaphore "c0": context deadline exceeded"), is sent again, exactly:
// it releases the acquisition of its lock context and no other of the
// same owner. A proxy holds Redis's replies to the releasing Client from
// the release on, until the Client sends the release again (it never
// does, before the fix: the Release failed with context deadline exceeded
// at its deadline + 40 ms).
func TestSemaphoreReleaseReplyLost(t *testing.T) {
	px := newReplyHoldProxy(t, server(t).Addr, "relx")
	// One connection, opened before the fault (see TestOnceBeginReplyPastLease:
	// a second one opened while replies are held never completes its
	// handshake, and a call sent on it never leaves the Client).
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.addr}, DisableCache: true, PipelineMultiplex: -1})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	c := newClientOn(t, rc, dsync.WithKeyPrefix(testPrefix(t)))
	// A fixed lease: no renewal names the semaphore while the replies are
	// held.
	s := c.NewSemaphore("relx", 2, dsync.WithLeaseTime(10*time.Second))
	// Under a context that can end but has no deadline, so that rueidis
	// reads the connection in the background: a call that gives up then
	// leaves the connection up, and the next one is sent on it.
	owner, cancel := context.WithCancel(dsync.WithOwner(context.Background()))
	defer cancel()
	// A release before: the script is in Redis, so the first try of the
	// release below runs there (its reply is what is lost).
	l0, err := s.Acquire(owner, 1)
	require.NoError(t, err)
	require.NoError(t, s.Release(l0, 1))
	l1, err := s.Acquire(owner, 1)
	require.NoError(t, err)
	l2, err := s.Acquire(owner, 1) // the same owner: 2 acquisitions
	require.NoError(t, err)

	waitPreloaded(t, c) // no load of its left to hold (see TestOnceBeginReplyPastLease)
	px.arm()
	rctx, cancel2 := context.WithTimeout(l1, 50*time.Millisecond)
	defer cancel2()
	start := time.Now()
	err = s.Release(rctx, 1)
	took := time.Since(start)
	px.release()
	t.Logf("Release returned after %v (%v); the release was sent %d times", took, err, px.sends())
	require.NoError(t, err, "the release, its first reply lost")
	require.Error(t, l1.Err(), "the released acquisition's lock context")
	require.NoError(t, l2.Err(), "the other acquisition's lock context")

	// Exactly one permit came back: the owner still holds l2's.
	other := c.NewSemaphore("relx", 2)
	_, ok, err := other.TryAcquire(ctxT(t), 2)
	require.NoError(t, err)
	require.False(t, ok, "2 permits free: the release was applied twice")
	lo, ok, err := other.TryAcquire(ctxT(t), 1)
	require.NoError(t, err)
	require.True(t, ok, "no permit free: the release was not applied")
	require.NoError(t, other.Release(lo, 1))
	require.NoError(t, s.Release(l2, 1))
}

// replyHoldProxy forwards connections to a Redis server; once armed, it
// holds everything the server sends (on every connection) until the
// Client has sent mark twice after the arming (a command sent again), or
// release is called.
type replyHoldProxy struct {
	addr   string
	mark   []byte
	mu     sync.Mutex
	armed  bool
	marks  int
	open   chan struct{} // closed: forward again
	opened sync.Once
}

func newReplyHoldProxy(t *testing.T, target, mark string) *replyHoldProxy {
	p := &replyHoldProxy{mark: []byte(mark), open: make(chan struct{})}
	t.Cleanup(p.release) // (before the proxy's own cleanup, which waits for its copies)
	p.addr = serveProxyBoth(t, target, func(in, out net.Conn) (func(), func()) {
		up := func() {
			defer out.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if err != nil {
					return
				}
				p.mu.Lock()
				if p.armed && bytes.Contains(buf[:n], p.mark) {
					p.marks++
					if p.marks == 2 {
						p.release()
					}
				}
				p.mu.Unlock()
				if _, err := out.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		down := func() {
			defer in.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := out.Read(buf)
				if err != nil {
					return
				}
				p.mu.Lock()
				armed := p.armed
				p.mu.Unlock()
				if armed {
					<-p.open
				}
				if _, err := in.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		return up, down
	})
	return p
}

func (p *replyHoldProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

// sends is how many times the Client sent mark since the arming.
func (p *replyHoldProxy) sends() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.marks
}

func (p *replyHoldProxy) release() { p.opened.Do(func() { close(p.open) }) }
