package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// redisServer is the one redis-server a run starts on a loopback port. The
// bench never talks to any other Redis, so figures cannot leak into (or be
// disturbed by) someone else's data.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	ctl  rueidis.Client // control connection: INFO, FLUSHALL, PING
}

func startRedis(bin string) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "dsync-bench-redis")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 { // a probed free port can be taken before redis binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
		s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
			"--loglevel", "warning")
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if last = s.cmd.Start(); last != nil {
			continue
		}
		if last = s.waitReady(); last == nil {
			return s, nil
		}
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %w", last)
}

func (s *redisServer) waitReady() error { return s.waitReadyWithin(5 * time.Second) }

func (s *redisServer) waitReadyWithin(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			ctl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true})
			if err == nil {
				s.ctl = ctl
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process; nothing to wait on
	}
	return fmt.Errorf("redis-server on %s not ready after %v", s.addr, d)
}

func (s *redisServer) stop() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// info returns the fields of one INFO section as a map.
func info(ctx context.Context, rc rueidis.Client, section string) (map[string]string, error) {
	s, err := rc.Do(ctx, rc.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// commandCalls sums the calls of every command Redis executed, including
// those a script ran through redis.call (Redis 7 counts them in
// commandstats), but not the INFO calls the bench itself makes.
func commandCalls(ctx context.Context, rc rueidis.Client) (int64, error) {
	m, err := info(ctx, rc, "commandstats")
	if err != nil {
		return 0, err
	}
	var total int64
	for k, v := range m {
		if !strings.HasPrefix(k, "cmdstat_") || k == "cmdstat_info" {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(n, 10, 64)
				total += c
			}
		}
	}
	return total, nil
}

// cmdStats is INFO commandstats: calls by command ("evalsha",
// "config|resetstat", ...).
type cmdStats map[string]int64

func commandStats(ctx context.Context, rc rueidis.Client) (cmdStats, error) {
	m, err := info(ctx, rc, "commandstats")
	if err != nil {
		return nil, err
	}
	st := cmdStats{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(n, 10, 64)
				st[name] += c
			}
		}
	}
	return st, nil
}

// total sums every command's calls but the bench's own INFO and CONFIG
// (CONFIG RESETSTAT is counted after it runs).
func (st cmdStats) total() int64 {
	var t int64
	for name, c := range st {
		base, _, _ := strings.Cut(name, "|")
		if base != "info" && base != "config" {
			t += c
		}
	}
	return t
}

func usedMemory(ctx context.Context, rc rueidis.Client) (int64, error) {
	m, err := info(ctx, rc, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// redisCPU is the Redis server's user+system CPU seconds so far.
func redisCPU(ctx context.Context, rc rueidis.Client) (float64, error) {
	m, err := info(ctx, rc, "cpu")
	if err != nil {
		return 0, err
	}
	u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	return u + s, nil
}
