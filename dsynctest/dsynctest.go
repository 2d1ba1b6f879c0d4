// Package dsynctest gives the tests of code that uses dsync a ready Client:
//
//	func TestTransfer(t *testing.T) {
//		c := dsynctest.NewClient(t)   // closed, and its server stopped, when t ends
//		err := transfer(ctx, c, ...)  // the code under test takes its locks through c
//	}
//
// The Client talks to a redis-server started for the test on a loopback
// port when one is on PATH, and otherwise to an in-process server
// (miniredis), so the test runs on a machine without Redis too. Either
// server is the test's own: no other test sees its locks.
//
// The in-process server runs dsync's Lua scripts in a Lua interpreter of
// its own, single-threaded, with no cluster, replication or persistence: it
// tests what your code does with the locks, not Redis failures. Use a real
// Redis for those (NewServer reports which one a test got). Its keys
// expire as time passes, as Redis's do (at most 10 ms late), so a lease
// that is not renewed runs out.
package dsynctest

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
)

// NewClient returns a Client on a server of its own, both closed when tb
// ends. It calls tb.Fatal if neither server can be started. opts are
// passed to dsync.Dial. For several Clients on one server (the processes
// of a service), use NewServer and its NewClient.
func NewClient(tb testing.TB, opts ...dsync.Option) *dsync.Client {
	tb.Helper()
	return NewServer(tb).NewClient(tb, opts...)
}

// A Server is a Redis for tests: a redis-server process or an in-process
// miniredis. A Server with only Addr set stands for a Redis that runs
// elsewhere: its methods connect to it, and Close does nothing.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// Embedded is true for the in-process server.
	Embedded bool

	real *redistest.Server
	mini *miniredis.Miniredis
	// stop ends the in-process server's clock (see tick); once makes
	// Close idempotent, ticking is the clock's goroutine.
	stop    chan struct{}
	once    sync.Once
	ticking sync.WaitGroup
}

// NewServer starts a Server for tb (see Start), stopped when tb ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Start starts a redis-server on a free loopback port when one is on
// PATH, and an in-process server otherwise. A redis-server that is on PATH
// but does not start is an error, not a reason to fall back. The caller
// must Close the Server. Start is meant for TestMain and programs; tests
// use NewServer.
func Start() (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return StartEmbedded()
	}
	r, err := redistest.StartServer()
	if err != nil {
		return nil, fmt.Errorf("dsynctest: redis-server is on PATH but did not start: %w", err)
	}
	return &Server{Addr: r.Addr, real: r}, nil
}

// StartEmbedded starts an in-process server (miniredis) on a free
// loopback port, for tests and for programs that should run with nothing
// installed (the repository's examples). Its keys expire as time passes.
// The caller must Close it.
func StartEmbedded() (*Server, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("dsynctest: starting the in-process server: %w", err)
	}
	s := &Server{Addr: m.Addr(), Embedded: true, mini: m, stop: make(chan struct{})}
	s.ticking.Go(s.tick)
	return s, nil
}

// expiryTick is how often the in-process server's keys age.
const expiryTick = 10 * time.Millisecond

// tick ages the in-process server's keys by the time that passes, until
// Close: miniredis counts a key's time to live down only when told to
// (FastForward), so without it a lease that nobody renews, or a crashed
// holder's, would never run out.
func (s *Server) tick() {
	t := time.NewTicker(expiryTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// ClientOption returns rueidis options for a client of s. The in-process
// server speaks RESP2 only, has no client-side caching, and is one node
// although it answers CLUSTER SLOTS, so its options say so.
func (s *Server) ClientOption() rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{s.Addr},
		DisableCache:      true,
		AlwaysRESP2:       s.Embedded,
		ForceSingleClient: s.Embedded,
	}
}

// Dial returns a Client on s, made by dsync.Dial with opts; the caller must
// Close it.
func (s *Server) Dial(ctx context.Context, opts ...dsync.Option) (*dsync.Client, error) {
	o := s.ClientOption()
	fit := dsync.WithDialOption(func(ro *rueidis.ClientOption) {
		ro.AlwaysRESP2, ro.ForceSingleClient = o.AlwaysRESP2, o.ForceSingleClient
	})
	return dsync.Dial(ctx, s.Addr, append([]dsync.Option{fit}, opts...)...)
}

// NewClient returns a Client on s, closed when tb ends (before s stops).
// Clients of one Server with the same key prefix share their locks, as the
// processes of a service do.
func (s *Server) NewClient(tb testing.TB, opts ...dsync.Option) *dsync.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Dial(ctx, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// Close stops the server. It is idempotent.
func (s *Server) Close() {
	if s.real != nil {
		s.real.Stop()
	}
	if s.mini != nil {
		s.once.Do(func() {
			if s.stop != nil {
				close(s.stop)
				s.ticking.Wait()
			}
			s.mini.Close()
		})
	}
}
