package dsync_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// pushDropProxy forwards a Client's connections to a Redis server and,
// once armed, drops the next pub/sub message pushed to the Client (a RESP3
// push ">3 message <channel> <payload>"), whichever connection carries
// it: the message is lost between the server and the subscriber, the
// connection stays up.
type pushDropProxy struct {
	addr    string
	mu      sync.Mutex
	armed   bool
	dropped chan string // the channel of the dropped message
	// hold, if set, makes the proxy hold the message instead of dropping
	// it: it says so on held, and forwards the message, and whatever
	// follows it on that connection, once hold is closed.
	hold chan struct{}
	held chan struct{}
	// lastMark is when the Client last sent a look: a script call (FCALL,
	// EVALSHA or EVAL) in bytes containing mark (unix ns; a script on a
	// key named so). Not moved by the connections' keepalive PINGs, nor
	// by the SUBSCRIBE to a channel named so: a waiter's first
	// subscription comes between two looks, and taken for a look, the
	// look after it could come after a release meant to follow the
	// waiter's last look (then it claims the grant itself: the failure
	// of TestOutlivedGrantNotReturned/RWMutexWrite in make test of
	// 6267568, reproduced with a throwaway delay before and after that
	// subscription).
	mark     []byte
	lastMark atomic.Int64
}

var pushMessage = []byte(">3\r\n$7\r\nmessage\r\n")

func newPushDropProxy(t *testing.T, target, mark string) *pushDropProxy {
	p := &pushDropProxy{dropped: make(chan string, 1), mark: []byte(mark)}
	p.serve(t, target)
	return p
}

// newPushHoldProxy is newPushDropProxy holding the message instead (see
// hold): release forwards it. lastMark follows the commands that name mark.
func newPushHoldProxy(t *testing.T, target, mark string) (p *pushDropProxy, release func()) {
	p = &pushDropProxy{hold: make(chan struct{}), held: make(chan struct{}, 1), mark: []byte(mark)}
	var once sync.Once
	release = func() { once.Do(func() { close(p.hold) }) }
	p.serve(t, target)
	t.Cleanup(release) // (before the proxy's cleanup, which waits for its copies)
	return p, release
}

func (p *pushDropProxy) serve(t *testing.T, target string) {
	p.addr = serveProxyBoth(t, target, func(in, out net.Conn) (func(), func()) {
		up := func() {
			defer out.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if err != nil {
					return
				}
				if p.mark != nil && bytes.Contains(buf[:n], p.mark) && isScriptCall(buf[:n]) {
					p.lastMark.Store(time.Now().UnixNano())
				}
				if _, err := out.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		return up, func() { p.down(in, out); in.Close() }
	})
}

func (p *pushDropProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

// down copies server to client. Replies and pushes arrive whole frames
// at a time only by luck, so it works on a buffer: while armed, a push
// message at the start of what is buffered is read whole (its two bulk
// strings) and dropped; anything else is forwarded up to the next
// possible push.
func (p *pushDropProxy) down(in, out net.Conn) {
	r := bufio.NewReaderSize(out, 64<<10)
	for {
		if _, err := r.Peek(1); err != nil { // wait for data, then look whether armed
			return
		}
		p.mu.Lock()
		armed := p.armed
		p.mu.Unlock()
		if !armed {
			chunk, _ := r.Peek(r.Buffered())
			if i := bytes.Index(chunk, pushMessage[:1]); i > 0 {
				chunk = chunk[:i] // up to a possible push: it may be armed by then
			}
			if _, err := in.Write(chunk); err != nil {
				return
			}
			_, _ = r.Discard(len(chunk))
			continue
		}
		head, _ := r.Peek(r.Buffered())
		var err error
		if k := min(len(head), len(pushMessage)); bytes.Equal(head[:k], pushMessage[:k]) && k < len(pushMessage) {
			// The start of what may be a push: it comes whole.
			if head, err = r.Peek(len(pushMessage)); err != nil {
				return
			}
		}
		if !bytes.HasPrefix(head, pushMessage) {
			// Forward one byte-run up to the next '>' and look again.
			chunk, _ := r.Peek(max(r.Buffered(), 1))
			if i := bytes.IndexByte(chunk[1:], '>'); i >= 0 {
				chunk = chunk[:i+1]
			}
			if _, err := in.Write(chunk); err != nil {
				return
			}
			_, _ = r.Discard(len(chunk))
			continue
		}
		if p.hold != nil {
			p.mu.Lock()
			p.armed = false
			p.mu.Unlock()
			p.held <- struct{}{}
			<-p.hold
			continue // not armed: forwarded as it is
		}
		_, _ = r.Discard(len(pushMessage))
		ch, err1 := readBulk(r)
		_, err2 := readBulk(r)
		if err1 != nil || err2 != nil {
			return
		}
		p.mu.Lock()
		p.armed = false
		p.mu.Unlock()
		p.dropped <- ch
	}
}

// isScriptCall reports whether b, bytes a Client sent, hold a script
// call.
func isScriptCall(b []byte) bool {
	return bytes.Contains(b, []byte("FCALL")) || bytes.Contains(b, []byte("EVAL"))
}

// readBulk reads one RESP bulk string "$<n>\r\n<n bytes>\r\n".
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 || line[0] != '$' {
		return "", io.ErrUnexpectedEOF
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil {
		return "", err
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// A grant whose message is lost between the release that grants it and
// the waiter's wake (a proxy in front of the waiter's Client drops that
// one push; the connection stays up, so nothing tells the waiter) is
// claimed by the waiter's fallback look, within lease/3 of the release:
// the waiter looks at most lease/3 after its previous look, which came
// before the release. (It used to be tested only with the pub/sub
// connection killed before the release, TestFIFOLostGrantMessage: the
// broken connection itself made the waiter look again.) The mechanism is
// checked, not the clock: the first look after the release, woken by
// its fallback timer, set for at most lease/3, claims the grant.
// (It checked the time from the release to the claim against lease/3,
// which the timer's lateness and the look's round trip on a loaded
// machine can pass: 505 ms in an idle make test of 6500a84.)
func TestFIFOGrantMessageDropped(t *testing.T) {
	const lease = 1500 * time.Millisecond
	for _, row := range fifoRows() {
		t.Run(row.name, func(t *testing.T) {
			px := newPushDropProxy(t, server(t).Addr, "drop")
			rcb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rcb.Close)
			ca := newClient(t, dsync.WithLease(lease))
			// The waiter's looks woken by its fallback timer: when, and
			// what the timer was set for.
			type poll struct {
				at time.Time
				d  time.Duration
			}
			var pmu sync.Mutex
			var polls []poll
			cb := newClientOn(t, rcb, dsync.WithKeyPrefix(prefixOf(t, ca)), dsync.WithLease(lease),
				dsync.WithFallbackPolled(func(_ string, d time.Duration) {
					pmu.Lock()
					polls = append(polls, poll{time.Now(), d})
					pmu.Unlock()
				}))
			holder, waiter := row.probe(ca, "drop"), row.open(cb, "drop")
			hctx, err := holder.lock(ctxT(t))
			require.NoError(t, err)
			got := make(chan error, 1)
			var wctx context.Context
			var gotAt time.Time
			go func() {
				l, err := waiter.lock(ctxT(t))
				wctx, gotAt = l, time.Now()
				got <- err
			}()
			waitFor(t, 2*time.Second, "the waiter to queue", func() bool { return waitersOf(t, ca, "drop") == 1 })
			// A look by the waiter after it queued (after its subscription:
			// it looks again once subscribed), then quiet: it looks again
			// at most lease/3 after its last look; the release comes 20 ms
			// or more after that look, so that the look is not in flight
			// (the release would then find a waiter that claims its grant
			// at once).
			mark := px.lastMark.Load()
			waitFor(t, 2*time.Second, "a look by the waiter", func() bool { return px.lastMark.Load() != mark })
			waitFor(t, 2*time.Second, "the waiter's last look 20 ms past", func() bool {
				return time.Since(time.Unix(0, px.lastMark.Load())) >= 20*time.Millisecond
			})
			px.arm()
			released := time.Now()
			require.NoError(t, holder.unlock(hctx))
			select {
			case ch := <-px.dropped:
				t.Logf("dropped the message on %q", ch)
			case <-time.After(3 * time.Second):
				t.Fatal("no message pushed to the waiter's Client after the release")
			}
			select {
			case err := <-got:
				require.NoError(t, err)
			case <-time.After(3 * time.Second):
				t.Fatal("the waiter did not claim its grant after its message was dropped")
			}
			pmu.Lock()
			var after []poll // the fallback looks between the release and the claim
			for _, p := range polls {
				if p.at.After(released) && p.at.Before(gotAt) {
					after = append(after, p)
				}
			}
			pmu.Unlock()
			looks := make([]string, len(after))
			for i, p := range after {
				looks[i] = fmt.Sprintf("%v after it (timer %v)", p.at.Sub(released).Round(time.Millisecond), p.d)
			}
			t.Logf("grant claimed %v after the release, its message dropped (lease/3 = %v); fallback looks in between: %v", gotAt.Sub(released), lease/3, looks)
			require.Len(t, after, 1, "fallback looks between the release and the claim: the first must claim the grant")
			require.LessOrEqual(t, after[0].d, lease/3, "the timer of the look that claimed the grant")
			ht, _ := dsync.FencingToken(hctx)
			wt, ok := dsync.FencingToken(wctx)
			require.True(t, ok, "no fencing token")
			require.Greater(t, wt, ht, "the grant's token")
			require.NoError(t, waiter.unlock(wctx))
			l, _ := acquireWithin(t, holder, 500*time.Millisecond, "another owner after the grantee's release")
			require.NoError(t, holder.unlock(l))
		})
	}
}
