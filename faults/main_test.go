package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var (
	soak            = flag.Bool("soak", false, "run the 30-minute soak instead of the 2-minute one")
	soakDur         = flag.Duration("soak.dur", 0, "the soak's length (default 2m, 30m with -soak)")
	soakHeapProfile = flag.String("soak.heapprofile", "", "write the soak's heap profiles to this path plus a suffix (as it runs and at the end)")
)

const roleEnv = "FAULTS_ROLE"

func TestMain(m *testing.M) {
	if r := os.Getenv(roleEnv); r != "" {
		os.Exit(runChild(r))
	}
	code := m.Run()
	if err := writeReport(code == 0); err != nil {
		fmt.Fprintln(os.Stderr, "writing the reliability report:", err)
		code = 1
	}
	if code == 0 {
		// toxiproxy's per-link goroutines end a moment after a proxy stops.
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// A child is a lock holder in another process: the test binary re-executed
// with a role, so that it can be SIGKILLed and SIGSTOPped. It prints one
// line per fact ("<word> <json or text>") for the parent to read.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

// startChild starts role against addr with prefix, lease and extra env.
func startChild(t testing.TB, role, addr, prefix string, lease time.Duration, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "FAULTS_ADDR="+addr, "FAULTS_PREFIX="+prefix, "FAULTS_LEASE="+lease.String())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, lines: make(chan string, 1<<16), done: make(chan struct{})}
	lines, done := c.lines, c.done
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
	}()
	// The cleanup holds the process and done, not c: the 1 MiB buffer of
	// lines goes with the last reader of a child that has exited (the soak
	// replaces a SIGKILLed child ~80 times in 30 minutes; each one's
	// buffer, pinned until the test ended, was most of the heap the soak
	// found over its baseline).
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	return c
}

// expect returns the text after word on the next line starting with word,
// failing after d. Lines before it are passed to other, if not nil.
func (c *child) expect(t testing.TB, word string, d time.Duration) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			require.True(t, ok, "child exited before %q", word)
			if w, rest, _ := strings.Cut(l, " "); w == word {
				return rest
			}
		case <-timer.C:
			t.Fatalf("child did not say %q within %v", word, d)
		}
	}
}

func (c *child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to child %d: %v (%s)", sig, c.cmd.Process.Pid, err, c.exitState())
	}
}

// exitState says how the child ended, if it has ("running" if not):
// for a signal that found it gone, the exit code or the signal that
// ended it (its stderr, in the test's, says why it exited, if it did so
// itself).
func (c *child) exitState() string {
	select {
	case <-c.done:
		// done is closed after cmd.Wait has returned.
		return "it had exited: " + c.cmd.ProcessState.String()
	case <-time.After(time.Second):
		return "running"
	}
}

func (c *child) wait(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Fatalf("child did not exit within %v", d)
	}
}

func runChild(role string) int {
	lease, _ := time.ParseDuration(os.Getenv("FAULTS_LEASE"))
	if os.Getenv("FAULTS_LAG") == "1" {
		// Its starvation probe (starve_test.go), each late span a "lag"
		// line.
		defer startLagProbe(func(s lagSpan) { say("lag", s) })()
	}
	// A child may start while a fault strikes (the soak replaces a killed
	// child whatever the network and the server are doing): rueidis fails
	// when its first connection does, so try again for a while.
	var rc rueidis.Client
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; {
		rc, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv("FAULTS_ADDR")}, DisableCache: true})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: connecting:", err)
		return 2
	}
	defer rc.Close()
	childRC = rc
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(os.Getenv("FAULTS_PREFIX")), dsync.WithLease(lease))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	res := remote{url: os.Getenv("FAULTS_STORE"), hc: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	switch role {
	case "worker":
		return childWorker(c, res)
	case "holder":
		return childHolder(c, res)
	}
	if f := childRoles[role]; f != nil {
		return f(c, res)
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

// childRC is a child's rueidis client (a deploying chaos child opens its
// Clients on it).
var childRC rueidis.Client

var outMu sync.Mutex

func say(word string, v any) {
	outMu.Lock()
	defer outMu.Unlock()
	if s, ok := v.(string); ok {
		fmt.Println(word, s)
		return
	}
	b, _ := json.Marshal(v)
	fmt.Println(word, string(b))
}

// childWorker runs FAULTS_G goroutines of work on FAULTS_NAME for
// FAULTS_DUR, printing every event, then "done".
func childWorker(c *dsync.Client, res resource) int {
	g, _ := strconv.Atoi(os.Getenv("FAULTS_G"))
	id, _ := strconv.Atoi(os.Getenv("FAULTS_ID"))
	dur, _ := time.ParseDuration(os.Getenv("FAULTS_DUR"))
	m := c.NewMutex(os.Getenv("FAULTS_NAME"))
	until := time.Now().Add(dur)
	var wg sync.WaitGroup
	var tl tally
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(context.Background(), m, id*100+i, res, func(e event) { say("ev", e) }, until, 5*time.Second, &tl)
		}()
	}
	wg.Wait()
	say("done", fmt.Sprintf("%d %d %d %d", tl.holds.Load(), tl.timeouts.Load(), tl.errs.Load(), tl.lost.Load()))
	return 0
}

// childHolder acquires FAULTS_NAME, says "held <token> <unix ns>", then
// writes to the fenced store every 10 ms until its lock context ends,
// saying "write <token> ok|stale <unix ns>" for each. It then says
// "cancel <unix ns> <cause>", unlocks, says "unlock <error>" and exits.
func childHolder(c *dsync.Client, res resource) int {
	m := c.NewMutex(os.Getenv("FAULTS_NAME"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lctx, err := m.LockContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	tok, _ := dsync.FencingToken(lctx)
	var cancelledAt atomic.Int64
	stop := context.AfterFunc(lctx, func() { cancelledAt.Store(now()) })
	say("held", fmt.Sprintf("%d %d", tok, now()))
	hold, _ := time.ParseDuration(os.Getenv("FAULTS_HOLD"))
	end := time.After(hold)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-lctx.Done():
			break loop
		case <-end:
			break loop
		case <-tick.C:
			// The fault strikes between the check and the write: only the
			// fence can stop a write from a holder that was frozen here.
			ok := res.fence(tok)
			say("write", fmt.Sprintf("%d %v %d", tok, ok, now()))
		}
	}
	if lctx.Err() != nil {
		// One more write, as from a holder frozen between its check of the
		// lock context and its write: only the fence can stop it.
		ok := res.fence(tok)
		say("write", fmt.Sprintf("%d %v %d", tok, ok, now()))
	}
	if !stop() { // AfterFunc ran (or runs): the lock context was cancelled
		for cancelledAt.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		say("cancel", fmt.Sprintf("%d %v", cancelledAt.Load(), context.Cause(lctx)))
	}
	err = m.UnlockContext(lctx)
	switch {
	case err == nil:
		say("unlock", "nil")
	case errors.Is(err, dsync.ErrNotHeld):
		say("unlock", "ErrNotHeld")
	default:
		say("unlock", err.Error())
	}
	_, _ = io.WriteString(os.Stdout, "")
	return 0
}
