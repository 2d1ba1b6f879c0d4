package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// sample is one run's figures, by metric name.
type sample map[string]float64

// env is what every scenario needs from the run.
type env struct {
	addr string
	ctl  rueidis.Client // the bench's own connection, for INFO and PING
	self string         // this binary, re-executed for child processes
	run  string         // unique per run, in every key
}

func (e *env) key(scenario, lib string, rep int) string {
	return fmt.Sprintf("bench:%s:%s:%s:%d", e.run, scenario, lib, rep)
}

func openLib(e *env, spec libSpec) (lib, *atomic.Int64, error) {
	rt := new(atomic.Int64)
	l, err := spec.open(e.addr, rt)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", spec.name, err)
	}
	return l, rt, nil
}

// lockOnce is a warm-up op. A warm-up wait that stalls is reported and
// skipped rather than ending the whole run.
func lockOnce(h handle) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Lock(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "  warm-up wait stalled (lock free, not acquired in 5s)\n")
			return nil
		}
		return err
	}
	return h.Unlock(ctx)
}

// serialCountOps is how many ops of the serial scenario its allocations,
// round trips and Redis commands per op are counted over.
const serialCountOps = 2000

// serial: one goroutine, lock+unlock one key.
func serial(e *env, spec libSpec, key string, d time.Duration) (sample, error) {
	l, rt, err := openLib(e, spec)
	if err != nil {
		return nil, err
	}
	defer l.close()
	h := l.handle(key)
	for range 200 { // connections, subscriptions, script caches
		if err := lockOnce(h); err != nil {
			return nil, err
		}
	}
	// One deadline for the whole run, not one per op (that would add
	// allocations to every lib): a lib that stalls (rueidislock does) must
	// not hang the bench. An op slower than 2 s counts as a stall.
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	stalls := 0
	op := func() error {
		t0 := time.Now()
		err := h.Lock(ctx)
		if time.Since(t0) > 2*time.Second {
			stalls++
		}
		if err != nil {
			return err
		}
		return h.Unlock(ctx)
	}
	calls0, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	rt0 := rt.Load()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range serialCountOps {
		if err := op(); err != nil {
			return stalled(ctx, err, stalls)
		}
	}
	runtime.ReadMemStats(&m1)
	rts := rt.Load() - rt0
	calls1, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if err := op(); err != nil {
			return stalled(ctx, err, stalls)
		}
		n++
	}
	el := time.Since(start)
	return sample{
		"stalls":    float64(stalls),
		"ns_op":     float64(el.Nanoseconds()) / float64(n),
		"allocs_op": float64(m1.Mallocs-m0.Mallocs) / serialCountOps,
		"bytes_op":  float64(m1.TotalAlloc-m0.TotalAlloc) / serialCountOps,
		"rt_op":     float64(rts) / serialCountOps,
		"cmds_op":   float64(calls1-calls0) / serialCountOps,
	}, nil
}

// stalled turns a wait cut off by the run's deadline into a result with
// the stalls (and no throughput), and passes other errors on.
func stalled(ctx context.Context, err error, stalls int) (sample, error) {
	if ctx.Err() == nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  a wait outlived the run's deadline: %v\n", err)
	return sample{"stalls": float64(stalls + 1), "aborted": 1}, nil
}

// parallel: 64 goroutines, each lock+unlock of a random key of 10,000.
func parallel(e *env, spec libSpec, key string, d time.Duration) (sample, error) {
	l, _, err := openLib(e, spec)
	if err != nil {
		return nil, err
	}
	defer l.close()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = key + ":" + strconv.Itoa(i)
	}
	if err := lockOnce(l.handle(keys[0])); err != nil {
		return nil, err
	}
	var ops, errs, stalls atomic.Int64
	var firstErr atomic.Value
	stopAt := time.Now().Add(d)
	// A wait still running 3 s after the window is cut off (a stall).
	ctx, cancel := context.WithDeadline(context.Background(), stopAt.Add(3*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	rcpu0, err := redisCPU(context.Background(), e.ctl)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuTime()
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				h := l.handle(keys[rand.IntN(len(keys))])
				t0 := time.Now()
				err := h.Lock(ctx)
				if time.Since(t0) > 2*time.Second {
					stalls.Add(1)
				}
				if err == nil {
					err = h.Unlock(ctx)
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	el := min(time.Since(start), d) // a stalled straggler must not stretch the window
	cpu := cpuTime() - cpu0
	rcpu1, err := redisCPU(context.Background(), e.ctl)
	if err != nil {
		return nil, err
	}
	n := float64(max(ops.Load(), 1))
	s := sample{"ops_s": float64(ops.Load()) / el.Seconds(), "errors": float64(errs.Load()), "stalls": float64(stalls.Load()),
		// Where an op's time goes: this process's CPU and Redis's CPU per op
		// (2 vCPUs carry both, so their sum bounds the throughput).
		"client_cpu_us_op": us(cpu) / n, "redis_cpu_us_op": (rcpu1 - rcpu0) * 1e6 / n}
	if v := firstErr.Load(); v != nil {
		fmt.Fprintf(os.Stderr, "  %s parallel: %d errors, first: %v\n", spec.name, errs.Load(), v)
	}
	return s, nil
}

// contended: n goroutines of one process on one key.
func contended(e *env, name string, mk func(i int) handle, closeFn func(), rt *atomic.Int64, n int, d time.Duration) (sample, error) {
	defer closeFn()
	handles := make([]handle, n)
	for i := range handles {
		handles[i] = mk(i)
	}
	for range 20 {
		if err := lockOnce(handles[0]); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	calls0, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	rt0 := rt.Load()
	res := work(handles, time.Now().Add(d))
	calls1, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	res.RT = rt.Load() - rt0
	if res.Errs > 0 {
		fmt.Fprintf(os.Stderr, "  %s contended: %d errors, first: %s\n", name, res.Errs, res.FirstErr)
	}
	return summarize(res, d, calls1-calls0), nil
}

func summarize(res workResult, d time.Duration, calls int64) sample {
	var acq int64
	for _, c := range res.Counts {
		acq += c
	}
	longest, stalls := gaps(res.Holds, 2*time.Second)
	s := sample{
		"acq_s":       float64(acq) / d.Seconds(),
		"wait_p50_ms": ms(percentile(res.Waits, 50)),
		"wait_p99_ms": ms(percentile(res.Waits, 99)),
		"fairness":    jain(res.Counts),
		"stalls":      float64(stalls),
		"max_free_ms": ms(longest),
		"errors":      float64(res.Errs),
	}
	if t, ok := tailOf(res.Acqs, res.Tokens, len(res.Counts), float64(d)); ok {
		s["p99_fifo_x"] = t.P99 / t.FIFO
		s["tail_seen"], s["tail_seen_all"] = t.N, t.NAll
		s["tail_gap_us"], s["tail_gap_all_us"] = t.Gap/1e3, t.GapAll/1e3
		s["tail_overtaken"] = t.Overtk
		if t.Tokens {
			s["trip_frac"], s["trip_tail"], s["trip_all"] = t.TripFrac, t.TripTail, t.TripAll
			s["p99_quiet_fifo_x"] = t.P99Quiet / t.FIFO
		}
	}
	if res.Total > 0 {
		s["cmds_acq"] = float64(calls) / float64(res.Total)
		s["rt_acq"] = float64(res.RT) / float64(res.Total)
	}
	return s
}

// child is a re-executed bench binary taking part in a scenario.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startChild(e *env, args ...string) (*child, error) {
	cmd := exec.Command(e.self, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}, nil
}

func (c *child) send(line string) error {
	_, err := io.WriteString(c.in, line+"\n")
	return err
}

func (c *child) recv() (string, error) {
	line, err := c.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("child: %w", err)
	}
	return strings.TrimSuffix(line, "\n"), nil
}

func (c *child) expect(prefix string) (string, error) {
	line, err := c.recv()
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return "", fmt.Errorf("child said %q, want %q", line, prefix)
	}
	return strings.TrimSpace(rest), nil
}

func (c *child) wait() {
	c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// crossProcess: procs child processes of g goroutines each, one key.
func crossProcess(e *env, spec libSpec, key string, procs, g int, d time.Duration) (sample, error) {
	kids := make([]*child, 0, procs)
	defer func() {
		for _, k := range kids {
			k.wait()
		}
	}()
	for range procs {
		k, err := startChild(e, "-child=xproc", "-lib="+spec.name, "-addr="+e.addr, "-key="+key, "-g="+strconv.Itoa(g))
		if err != nil {
			return nil, err
		}
		kids = append(kids, k)
	}
	for _, k := range kids {
		if _, err := k.expect("ready"); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	calls0, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	stopAt := time.Now().Add(50 * time.Millisecond).Add(d) // children start together, 50 ms from now
	for _, k := range kids {
		if err := k.send("go " + strconv.FormatInt(stopAt.UnixNano(), 10) + " " + strconv.FormatInt(int64(d), 10)); err != nil {
			return nil, err
		}
	}
	var all workResult
	var spans *spanDump // the traced lib's, from every child
	perProc := make([]int64, 0, procs)
	for _, k := range kids {
		line, err := k.expect("result")
		if err != nil {
			return nil, err
		}
		var r workResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, err
		}
		var sum int64
		for _, c := range r.Counts {
			sum += c
		}
		perProc = append(perProc, sum)
		all.Counts = append(all.Counts, r.Counts...)
		all.Waits = append(all.Waits, r.Waits...)
		all.Holds = append(all.Holds, r.Holds...)
		if r.Spans != nil {
			spans = spans.merge(r.Spans)
		}
		all.Total += r.Total
		all.RT += r.RT
		all.Errs += r.Errs
		if all.FirstErr == "" {
			all.FirstErr = r.FirstErr
		}
	}
	calls1, err := commandCalls(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	if all.Errs > 0 {
		fmt.Fprintf(os.Stderr, "  %s cross-process: %d errors, first: %s\n", spec.name, all.Errs, all.FirstErr)
	}
	s := summarize(all, d, calls1-calls0)
	s["proc_fairness"] = jain(perProc)
	if spans != nil {
		maps.Copy(s, spans.figures())
	}
	return s, nil
}

// childXproc is the child side of crossProcess.
func childXproc(addr, libName, key string, g int) error {
	spec, err := specByName(libName)
	if err != nil {
		return err
	}
	rt := new(atomic.Int64)
	l, err := spec.open(addr, rt)
	if err != nil {
		return err
	}
	defer l.close()
	handles := make([]handle, g)
	for i := range handles {
		handles[i] = l.handle(key)
	}
	if err := lockOnce(handles[0]); err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return err
	}
	var stopNs, dNs int64
	if _, err := fmt.Sscanf(line, "go %d %d", &stopNs, &dNs); err != nil {
		return err
	}
	stopAt := time.Unix(0, stopNs)
	time.Sleep(time.Until(stopAt.Add(-time.Duration(dNs)))) // the common start
	rt0 := rt.Load()
	res := work(handles, stopAt)
	res.RT = rt.Load() - rt0
	if tl, ok := l.(*tracedLib); ok {
		tl.close() // every hold span ended (a second close does nothing)
		res.Spans = tl.spans()
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", b)
	return nil
}

// handoff: this process holds the lock, a child is already waiting for it;
// measure release start -> the child's acquire returning.
func handoff(e *env, spec libSpec, key string, rounds int) (sample, error) {
	l, _, err := openLib(e, spec)
	if err != nil {
		return nil, err
	}
	defer l.close()
	h := l.handle(key)
	if err := lockOnce(h); err != nil {
		return nil, err
	}
	k, err := startChild(e, "-child=handoff", "-lib="+spec.name, "-addr="+e.addr, "-key="+key)
	if err != nil {
		return nil, err
	}
	defer k.wait()
	if _, err := k.expect("ready"); err != nil {
		return nil, err
	}
	const warm = 3 // first rounds open connections and subscriptions
	lat := make([]time.Duration, 0, rounds+warm)
	rel := make([]time.Duration, 0, rounds+warm)
	stalls := 0
	for range rounds + warm {
		d, r, err := handoffRound(h, k)
		if errors.Is(err, errHolderStalled) {
			stalls++
			continue
		}
		if err != nil {
			return nil, err
		}
		if d > 2*time.Second {
			stalls++
		}
		lat = append(lat, d)
		rel = append(rel, r)
	}
	_ = k.send("quit")
	lat, rel = lat[warm:], rel[warm:]
	return sample{
		"handoff_p50_us": us(percentile(lat, 50)),
		// The holder's release call alone (for wake, its PUBLISH): with
		// the handoff, where the time above the wake floor goes.
		"release_p50_us": us(percentile(rel, 50)),
		"handoff_p99_us": us(percentile(lat, 99)),
		"handoff_max_ms": ms(percentile(lat, 100)),
		"stalls":         float64(stalls),
	}, nil
}

func childHandoff(addr, libName, key string) error {
	spec, err := specByName(libName)
	if err != nil {
		return err
	}
	l, err := spec.open(addr, new(atomic.Int64))
	if err != nil {
		return err
	}
	defer l.close()
	h := l.handle(key)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "wait" {
			return nil
		}
		fmt.Println("waiting")
		// A waiter that has not got the free lock after 5 s has stalled;
		// it reports when it gave up, and the rounds go on.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.Lock(ctx)
		t1 := time.Now().UnixNano()
		if err != nil && ctx.Err() != nil {
			cancel()
			fmt.Printf("acquired %d\n", t1)
			continue
		}
		if err == nil {
			err = h.Unlock(context.Background())
		}
		cancel() // only now: rueidislock releases when ctx ends
		if err != nil {
			fmt.Printf("acquired error: %v\n", err)
			return err
		}
		fmt.Printf("acquired %d\n", t1)
	}
	return nil
}

// pingRTT is one PING round trip from this process, median and p99 of n.
func pingRTT(e *env, n int) (p50, p99 time.Duration, err error) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := e.ctl.Do(ctx, e.ctl.B().Ping().Build()).Error(); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t))
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}

// errHolderStalled: the holder's own wait for the free lock timed out.
var errHolderStalled = errors.New("holder stalled")

// handoffRound: lock here, let the child start waiting, release, and return
// how long after the release started the child's acquire returned, and how
// long the release call took.
func handoffRound(h handle, k *child) (d, rel time.Duration, err error) {
	// ctx must outlive the hold: rueidislock releases when it ends.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t := time.Now()
	if err := h.Lock(ctx); err != nil {
		if ctx.Err() != nil {
			return 0, 0, errHolderStalled
		}
		return 0, 0, err
	}
	if time.Since(t) > 2*time.Second { // the lock was free: nobody else runs
		fmt.Fprintf(os.Stderr, "  handoff: holder's own lock took %v\n", time.Since(t))
	}
	if err := k.send("wait"); err != nil {
		return 0, 0, err
	}
	if _, err := k.expect("waiting"); err != nil {
		return 0, 0, err
	}
	// The waiter must be inside its wait, not starting it: give it time to
	// reach Redis and block. Jitter keeps 1 ms pollers from being in phase
	// with the release.
	time.Sleep(15*time.Millisecond + rand.N(5*time.Millisecond))
	t0 := time.Now().UnixNano()
	if err := h.Unlock(context.Background()); err != nil {
		return 0, 0, err
	}
	rel = time.Duration(time.Now().UnixNano() - t0)
	v, err := k.expect("acquired")
	if err != nil {
		return 0, 0, err
	}
	t1, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("child: %s", v)
	}
	return time.Duration(t1 - t0), rel, nil
}
