package faults

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

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// redisServer is a redis-server process on a free loopback port, without
// persistence, with DEBUG enabled for local connections. It predates this
// module's use of internal/redistest (which it can import: the TLS test's
// certificates come from there); folding the two is left to do.
type redisServer struct {
	Addr string
	Port int
	args []string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

func startRedis(t testing.TB, args ...string) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is required under CI: %v", err)
		}
		t.Skip("redis-server not installed")
	}
	s := &redisServer{args: args, dir: t.TempDir()}
	var err error
	for range 5 { // a probed free port can be taken before redis binds it
		s.Port = freePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		if err = s.start(); err == nil {
			t.Cleanup(s.kill)
			return s
		}
	}
	t.Fatal(err)
	return nil
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *redisServer) start() error {
	argv := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--enable-debug-command", "local", "--loglevel", "warning",
	}
	argv = append(argv, s.args...)
	cmd := exec.Command("redis-server", argv...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	probe := s.Addr
	if p := tlsPortArg(s.args); p != "" && s.Port == 0 {
		probe = "127.0.0.1:" + p
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", probe, 100*time.Millisecond); err == nil {
			c.Close()
			if s.Port == 0 || pingOK(s.Addr) {
				break
			}
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on %s exited at start", probe)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return errors.New("redis-server did not answer within 10s on " + probe)
		}
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func tlsPortArg(args []string) string {
	for i, a := range args {
		if a == "--tls-port" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func pingOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, _ := c.Read(buf)
	return string(buf[:n]) == "+PONG\r\n"
}

// kill ends the server (SIGKILL: no persistence, so its data is gone) and
// waits for it to exit, so the port can be bound again.
func (s *redisServer) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped server cannot die
	_ = cmd.Process.Kill()
	<-done
}

// restart kills the server and starts an empty one on the same port.
func (s *redisServer) restart(t testing.TB) {
	t.Helper()
	s.kill()
	var err error
	for range 50 { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
}

// shutdownNoSave stops the server the way an operator would, losing data.
func (s *redisServer) shutdownNoSave(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	_ = s.do(t, "SHUTDOWN", "NOSAVE").Error() // the connection drops: no reply
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("redis-server did not shut down")
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
}

func (s *redisServer) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	require.NotNil(t, cmd, "redis-server not running")
	require.NoError(t, cmd.Process.Signal(sig))
}

// client returns a rueidis client to addr (the server, or a proxy in front
// of it), closed when t ends. Timeouts are short so that a blackholed
// connection is noticed within a lease.
func client(t testing.TB, addr string, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	o := rueidis.ClientOption{
		InitAddress:       []string{addr},
		DisableCache:      true,
		ConnWriteTimeout:  500 * time.Millisecond,
		Dialer:            net.Dialer{Timeout: 500 * time.Millisecond, KeepAlive: time.Second},
		DisableRetry:      false,
		BlockingPoolSize:  32,
		PipelineMultiplex: -1,
	}
	for _, f := range opts {
		f(&o)
	}
	rc, err := rueidis.NewClient(o)
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	return rc
}

// do runs one command on a fresh connection, for disturbing or inspecting
// the server outside of any client under test.
func (s *redisServer) do(t testing.TB, args ...string) rueidis.RedisResult {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true, DisableRetry: true})
	if err != nil {
		return rueidis.RedisResult{}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// netProxy is an in-process toxiproxy between the clients under test and
// redis-server, for network faults.
type netProxy struct {
	Addr string
	p    *toxiproxy.Proxy
}

func newProxy(t testing.TB, upstream string) *netProxy {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "redis", "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &netProxy{Addr: p.Listen, p: p}
}

// add installs a toxic; stream is "upstream" (to Redis) or "downstream".
func (np *netProxy) add(t testing.TB, name, typ, stream string, attrs string) {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attrs)
	_, err := np.p.Toxics.AddToxicJson(strings.NewReader(js))
	require.NoError(t, err)
}

func (np *netProxy) remove(t testing.TB, name string) {
	t.Helper()
	require.NoError(t, np.p.Toxics.RemoveToxic(context.Background(), name))
}

// latency delays each direction by d.
func (np *netProxy) latency(t testing.TB, d time.Duration) func() {
	ms := d.Milliseconds()
	np.add(t, "lat-up", "latency", "upstream", fmt.Sprintf(`{"latency":%d}`, ms))
	np.add(t, "lat-down", "latency", "downstream", fmt.Sprintf(`{"latency":%d}`, ms))
	return func() { np.remove(t, "lat-up"); np.remove(t, "lat-down") }
}

// blackhole drops every byte in both directions, keeping connections open.
func (np *netProxy) blackhole(t testing.TB) func() {
	np.add(t, "bh-up", "timeout", "upstream", `{"timeout":0}`)
	np.add(t, "bh-down", "timeout", "downstream", `{"timeout":0}`)
	return func() { np.remove(t, "bh-up"); np.remove(t, "bh-down") }
}

// reset closes with RST every connection whose reply arrives while it is on:
// the command has run in Redis, its reply is lost.
func (np *netProxy) reset(t testing.TB) func() {
	np.add(t, "rst", "reset_peer", "downstream", `{"timeout":0}`)
	return func() { np.remove(t, "rst") }
}

// timeoutToxic stops every byte and closes each connection after ms
// (toxiproxy's "timeout").
func (np *netProxy) timeoutToxic(t testing.TB, ms int) func() {
	np.add(t, "to-up", "timeout", "upstream", fmt.Sprintf(`{"timeout":%d}`, ms))
	return func() { np.remove(t, "to-up") }
}

// limitData closes each connection once n bytes have gone to Redis on it
// (toxiproxy's "limit_data"): commands are cut off mid-stream.
func (np *netProxy) limitData(t testing.TB, n int) func() {
	np.add(t, "ld-up", "limit_data", "upstream", fmt.Sprintf(`{"bytes":%d}`, n))
	return func() { np.remove(t, "ld-up") }
}
