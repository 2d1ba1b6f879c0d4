package dsync_test

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// TestFirstLockNotBehindPreload: a new Client loads its scripts in the
// background; on a server slow to compile scripts (here a proxy that holds
// each SCRIPT LOAD 50 ms, as an embedded miniredis under the race detector
// on a loaded machine takes 10-35 ms) the first acquisition must not wait
// behind all of them. When the Client sent them in one pipeline, the
// acquisition's reply came ~2.4 s after it was sent, past its 1 s lease,
// and its lock context was lost as soon as it was returned
// (examples/scoped failed 8-12 of 20 runs so).
func TestFirstLockNotBehindPreload(t *testing.T) {
	p := newSlowLoadProxy(t, server(t).Addr, 50*time.Millisecond)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	c := newClientOn(t, rc, dsync.WithKeyPrefix(testPrefix(t)), dsync.WithLease(time.Second))
	select { // the preload is under way: the acquisition is sent behind it
	case <-p.loading:
	case <-time.After(10 * time.Second):
		t.Fatal("the Client sent no SCRIPT LOAD")
	}
	m := c.NewMutex("first")
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, lctx.Err(), "the lock was lost as soon as it was acquired")
	require.NoError(t, m.UnlockContext(lctx))
}

// slowLoadProxy forwards connections to a Redis server, holding each SCRIPT
// LOAD for delay before passing it on (and so every command behind it on
// its connection, as a server busy compiling would).
type slowLoadProxy struct {
	addr    string
	loading chan struct{} // closed at the first SCRIPT LOAD
	once    sync.Once
}

func newSlowLoadProxy(t *testing.T, target string, delay time.Duration) *slowLoadProxy {
	p := &slowLoadProxy{loading: make(chan struct{})}
	p.addr = serveProxy(t, target, func(in, out net.Conn) func() {
		return func() { p.forward(out, in, delay) }
	})
	return p
}

// serveProxy listens on a loopback port and, for each connection it
// accepts, dials target, calls accepted (in the accept loop) and runs the
// forwarder it returns (client to server) and a copy from server to client
// on goroutines of their own. The test's cleanup closes the listener and
// every connection and waits for those goroutines. It returns the address.
func serveProxy(t *testing.T, target string, accepted func(in, out net.Conn) (up func())) string {
	return serveProxyBoth(t, target, func(in, out net.Conn) (func(), func()) { return accepted(in, out), nil })
}

// serveProxyBoth is serveProxy with a forwarder for each direction: down
// (server to client, closing in when done) replaces the plain copy unless
// nil.
func serveProxyBoth(t *testing.T, target string, accepted func(in, out net.Conn) (up, down func())) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			up, down := accepted(in, out)
			if down == nil {
				down = func() { _, _ = io.Copy(in, out); in.Close() }
			}
			wg.Go(down)
			wg.Go(up)
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// forward copies the commands (RESP arrays of bulk strings) from in to out,
// one at a time.
func (p *slowLoadProxy) forward(out, in net.Conn, delay time.Duration) {
	defer out.Close()
	r := bufio.NewReader(in)
	for {
		cmd, args, err := readCommand(r)
		if err != nil {
			return
		}
		if len(args) >= 2 && strings.EqualFold(args[0], "script") && strings.EqualFold(args[1], "load") {
			p.once.Do(func() { close(p.loading) })
			time.Sleep(delay) // the server compiling the script
		}
		if _, err := out.Write(cmd); err != nil {
			return
		}
	}
}

// readCommand reads one command as sent by rueidis: its bytes, and its
// first two arguments.
func readCommand(r *bufio.Reader) (raw []byte, args []string, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	raw = append(raw, line...)
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || !strings.HasPrefix(line, "*") {
		return nil, nil, io.ErrUnexpectedEOF
	}
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || !strings.HasPrefix(line, "$") {
			return nil, nil, io.ErrUnexpectedEOF
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(r, arg); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, line...), arg...)
		if len(args) < 2 {
			args = append(args, string(arg[:size]))
		}
	}
	return raw, args, nil
}
