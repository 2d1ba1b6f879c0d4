// Package redistest starts real redis-server processes on loopback ports for
// tests, and stops them. Tests never talk to any other address.
//
// When redis-server is not on PATH, tests that need it are skipped, except
// when the CI environment variable is set: then they fail, so a CI machine
// that lost its Redis cannot pass by running nothing.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Server is one redis-server process started by this package.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	args []string
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Require fails (under CI) or skips tb when redis-server is missing.
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redis-server is not installed, and CI is set: install it (apt-get install -y redis-server): %v", err)
		}
		tb.Skip("redis-server not installed; set CI to make this a failure")
	}
}

// Start starts a redis-server for tb on a free loopback port; it is stopped
// when tb ends. Extra args are appended to the command line.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	Require(tb)
	s, err := StartServer(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartServer starts a redis-server on a free loopback port. The caller
// must Stop it. It is meant for TestMain, where there is no testing.TB.
func StartServer(args ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redistest: redis-server not installed: %w", err)
	}
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, args: args, dir: dir}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, last
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	argv := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--loglevel", "warning",
	}
	if debugFlag() {
		argv = append(argv, "--enable-debug-command", "local")
	}
	argv = append(argv, s.args...)
	return s.run(argv...)
}

// debugFlag reports whether redis-server knows --enable-debug-command
// (Redis 7; DEBUG is always on before it, and the flag would stop an older
// server from starting, such as a user's Redis 6 under dsynctest).
var debugFlag = sync.OnceValue(func() bool {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return true
	}
	_, v, ok := strings.Cut(string(out), " v=")
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return !ok || err != nil || major >= 7
})

// Stop kills the server and removes its directory. It is idempotent.
func (s *Server) Stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		// Wait until the port is free again, so a Restart can bind it.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// Restart kills the server (losing its data: no persistence) and starts it
// again on the same port.
func (s *Server) Restart() error {
	s.kill()
	return s.start()
}

// Pid returns the server's process id, or 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Signal sends sig to the server process (SIGSTOP and SIGCONT to stall it).
func (s *Server) Signal(sig syscall.Signal) error {
	pid := s.Pid()
	if pid == 0 {
		return errors.New("redistest: server not running")
	}
	return syscall.Kill(pid, sig)
}

// Client returns a rueidis client for the server, closed when tb ends.
func (s *Server) Client(tb testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	o := rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true}
	for _, f := range opts {
		f(&o)
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	return rc
}

// Do runs a raw command on the server with a fresh connection, for tests
// that inspect or disturb it.
func (s *Server) Do(tb testing.TB, args ...string) rueidis.RedisResult {
	tb.Helper()
	rc := s.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rc.Do(ctx, rc.B().Arbitrary(args...).Build())
}
