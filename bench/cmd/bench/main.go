// Command bench measures dsync beside its peers on one Redis, in one run.
//
// It starts its own redis-server on a loopback port, runs every scenario
// for dsync and each peer interleaved (A B A B ...), several repeats, and
// reports medians and ratios: a markdown table on stdout and in
// results/latest.md, and everything in results/latest.json. See
// bench/README.md for what each scenario measures.
//
// With -docs it runs nothing: it writes results/latest.md again from
// results/latest.json, and the performance blocks of README.md and
// bench/README.md from them (internal/benchdoc), which make bench does
// after a run; the root module's tests fail while those blocks differ from
// what -docs would write.
//
// Usage (from bench/):
//
//	go run ./cmd/bench [-quick] [-spin] [-reps n] [-libs a,b] [-scenarios a,b]
//	go run ./cmd/bench -docs
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

type settings struct {
	Quick         bool          `json:"quick"`
	Spin          bool          `json:"spin"`
	Reps          int           `json:"reps"`
	Serial        time.Duration `json:"serial_ns"`
	Parallel      time.Duration `json:"parallel_ns"`
	Contended     time.Duration `json:"contended_ns"`
	CrossProcess  time.Duration `json:"cross_process_ns"`
	HandoffRounds int           `json:"handoff_rounds"`
	ScaleLocks    int           `json:"scale_locks"`
	ScaleHold     time.Duration `json:"scale_hold_ns"`
	// NoticeRounds is the notice scenario's rounds per kind and repeat.
	NoticeRounds int `json:"notice_rounds,omitempty"`
}

// primsFlag limits the primitives scenario to some of its rows (each still
// runs beside the reference), for a quicker look at one primitive.
var primsFlag = flag.String("prims", "", "primitives: comma-separated rows to run beside the Mutex h0 reference (default all), e.g. \"Semaphore 1\"")

func main() {
	var (
		quick     = flag.Bool("quick", false, "a ~1 minute run: shorter windows, 2 repeats")
		spin      = flag.Bool("spin", false, "keep one lowest-priority busy process per CPU running, so idle-CPU wake-ups do not dominate latencies")
		reps      = flag.Int("reps", 0, "repeats per scenario (default 3, quick 2)")
		libsFlag  = flag.String("libs", "", "comma-separated libs to run (default all)")
		scenFlag  = flag.String("scenarios", "", "comma-separated scenarios: serial,keys,parallel,contended,xproc,handoff,primitives,scale,notice (default all)")
		out       = flag.String("out", "results", "directory for latest.json and latest.md")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of this process (not of children) to this file")
		redisBin  = flag.String("redis-server", "redis-server", "redis-server binary")
		childRole = flag.String("child", "", "internal: run as a child process (xproc, handoff, scale, notice, spin)")
		addr      = flag.String("addr", "", "internal: Redis address for a child")
		libName   = flag.String("lib", "", "internal: lib for a child")
		key       = flag.String("key", "", "internal: key for a child")
		g         = flag.Int("g", 8, "internal: goroutines of an xproc child")
		n         = flag.Int("n", 100000, "internal: locks of a scale child")
		hold      = flag.Duration("hold", 10*time.Second, "internal: holding window of a scale child")
		lease     = flag.Duration("lease", 0, "internal: lease of a capacity held child")
		rounds    = flag.Int("rounds", 2, "internal: renewal rounds of a capacity held child")

		capacity  = flag.Bool("capacity", false, "run the capacity scenarios (make scale) instead: held locks, waiters, processes; writes scale.json and scale.md")
		capHeld   = flag.String("cap-held", "10000,100000,1000000", "capacity: numbers of locks held by one process")
		capShort  = flag.Int("cap-short", 100000, "capacity: held runs up to this many locks are repeated at a 3 s lease")
		capWait   = flag.Int("cap-waiters", 10000, "capacity: waiters (on as many locks, and on one)")
		capModes  = flag.String("cap-wait-modes", "", "capacity: waiters runs, comma-separated of close,unlock,one (default all)")
		capProcs  = flag.Int("cap-procs", 50, "capacity: processes contending on -cap-locks locks")
		capG      = flag.Int("cap-g", 2, "capacity: goroutines per process")
		capLocks  = flag.Int("cap-locks", 1000, "capacity: locks the processes contend on")
		capWindow = flag.Duration("cap-window", 5*time.Second, "capacity: window of the processes run")
		capClust  = flag.Bool("cap-cluster", true, "capacity: also run on a 3-master test cluster (needs redis-cli)")
		capClN    = flag.Int("cap-cluster-held", 100000, "capacity: locks held on the cluster")
		instr     = flag.Int("instr", 0, "instead of the scenarios: count the instructions redis-server runs per uncontended lock+unlock cycle of each of -libs (default dsync,raw) over this many cycles, under valgrind's callgrind (needs valgrind)")
		instrRen  = flag.Int("instr-renew", 0, "instead of the scenarios: count the instructions redis-server runs per renewal of one hold, for each of -instr-kinds, with this many holds, under callgrind (needs valgrind)")
		instrKind = flag.String("instr-kinds", "", "renewal kinds for -instr-renew (default all: mutex,fair,rw-read,rw-write,sem,once,group,election)")
		instrRnds = flag.Int("instr-rounds", 3, "renewal rounds counted by -instr-renew")
		instrGr   = flag.Int("instr-grant", 0, "instead of the scenarios: count the instructions redis-server runs for a Mutex release that grants the lock to another Client's wait, and for one that grants nobody, over this many rounds, under callgrind (needs valgrind)")
		valgrind  = flag.String("valgrind", "valgrind", "valgrind binary, for -instr")
		capProf   = flag.String("cap-profile", "", "capacity: held children write heap (at hold) and CPU (over the window) profiles to this directory, waiters children a CPU profile of the release window")
		docs      = flag.Bool("docs", false, "instead of the scenarios: write results/latest.md again from results/latest.json, and the performance blocks of ../README.md and README.md from them")
	)
	flag.Parse()
	if *docs {
		if err := writeDocs(*out, ".."); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *childRole != "" {
		inChild = true
		var err error
		switch *childRole {
		case "held":
			err = childHeld(*addr, *n, *lease, *rounds, *out)
		case "waiters":
			err = childWaiters(*addr, *n, *key, *out)
		case "proc":
			err = childProc(*addr, *key, *g, *n)
		default:
			err = runChild(*childRole, *addr, *libName, *key, *g, *n, *hold)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench child %s: %v\n", *childRole, err)
			os.Exit(1)
		}
		return
	}
	if *instrGr > 0 {
		if err := runInstrGrant(*instrGr, *valgrind, *redisBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *instrRen > 0 {
		if err := runInstrRenew(split(*instrKind), *instrRen, *instrRnds, *valgrind, *redisBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *instr > 0 {
		if err := runInstr(split(*libsFlag), *instr, *valgrind, *redisBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *capacity {
		cs := capSettings{HeldShort: *capShort, Rounds: 2, ShortRound: 5, Waiters: *capWait, WaitModes: split(*capModes), Procs: *capProcs, ProcG: *capG,
			ProcLocks: *capLocks, ProcWindow: *capWindow, Cluster: *capClust, ClusterN: *capClN, Profile: *capProf}
		for _, f := range split(*capHeld) {
			v, err := strconv.Atoi(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -cap-held:", err)
				os.Exit(2)
			}
			cs.Held = append(cs.Held, v)
		}
		if err := runCapacity(cs, *out, *redisBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	st := settings{Quick: *quick, Spin: *spin, Reps: 3, Serial: time.Second, Parallel: 1500 * time.Millisecond,
		Contended: 2 * time.Second, CrossProcess: 2 * time.Second, HandoffRounds: 40, ScaleLocks: 100000, ScaleHold: 10 * time.Second, NoticeRounds: 200}
	if *quick {
		st.Reps, st.Serial, st.Parallel, st.Contended, st.CrossProcess, st.HandoffRounds, st.ScaleHold, st.NoticeRounds =
			2, 300*time.Millisecond, 500*time.Millisecond, 800*time.Millisecond, time.Second, 20, 4*time.Second, 100
	}
	if *reps > 0 {
		st.Reps = *reps
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(st, split(*libsFlag), split(*scenFlag), *out, *redisBin); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func runChild(role, addr, libName, key string, g, n int, hold time.Duration) error {
	switch role {
	case "xproc":
		return childXproc(addr, libName, key, g)
	case "handoff":
		return childHandoff(addr, libName, key)
	case "scale":
		return childScale(addr, n, hold)
	case "notice":
		return childNotice(addr, key)
	case "spin":
		// Lowest priority: it only soaks up idle time, so CPUs never go
		// idle (and never need waking), while any real work preempts it.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19)
		runtime.GOMAXPROCS(1)
		for {
		}
	}
	return fmt.Errorf("unknown child role %q", role)
}

func run(st settings, onlyLibs, onlyScen []string, outDir, redisBin string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	srv, err := startRedis(redisBin)
	if err != nil {
		return err
	}
	defer srv.stop()
	if st.Spin {
		stop, err := startSpinners(self)
		if err != nil {
			return err
		}
		defer stop()
	}
	e := &env{addr: srv.addr, ctl: srv.ctl, self: self, run: fmt.Sprint(time.Now().Unix())}
	rep := newReport(st, machineInfo(srv.ctl))
	want := func(s string) bool { return len(onlyScen) == 0 || slices.Contains(onlyScen, s) }
	pick := func(filter func(libSpec) bool) []libSpec {
		var out []libSpec
		for _, s := range libs {
			if (len(onlyLibs) == 0 || slices.Contains(onlyLibs, s.name)) && filter(s) {
				out = append(out, s)
			}
		}
		return out
	}
	// The FIFO handoff (a FairMutex) and the one-hop floor (wake) run with
	// the handoff scenario when dsync does.
	pickFIFO := func() []libSpec {
		var out []libSpec
		for _, s := range []libSpec{fifoSpec, wakeSpec} {
			if len(onlyLibs) == 0 || slices.Contains(onlyLibs, "dsync") || slices.Contains(onlyLibs, s.name) {
				out = append(out, s)
			}
		}
		return out
	}
	// The Mutex through sync.Locker runs beside dsync (right after it) in
	// serial and keys, when dsync runs.
	withLocker := func(specs []libSpec) []libSpec {
		if len(onlyLibs) > 0 && !slices.Contains(onlyLibs, "dsync") && !slices.Contains(onlyLibs, lockerSpec.name) {
			return specs
		}
		i := slices.IndexFunc(specs, func(s libSpec) bool { return s.name == "dsync" })
		return slices.Insert(specs, i+1, lockerSpec)
	}
	// The traced Mutex runs right after dsync in serial, contended and
	// xproc, when dsync runs.
	withTraced := func(specs []libSpec) []libSpec {
		if len(onlyLibs) > 0 && !slices.Contains(onlyLibs, "dsync") && !slices.Contains(onlyLibs, tracedSpec.name) {
			return specs
		}
		i := slices.IndexFunc(specs, func(s libSpec) bool { return s.name == "dsync" })
		return slices.Insert(specs, i+1, tracedSpec)
	}
	notH0 := func(s libSpec) bool { return s.name != "dsync-h0" }
	keyed := func(s libSpec) bool { return s.keyed != nil }
	isLock := func(s libSpec) bool { return s.lock }
	isLockNotH0 := func(s libSpec) bool { return s.lock && notH0(s) }
	start := time.Now()

	type scen struct {
		name string
		libs []libSpec
		f    func(spec libSpec, key string) (sample, error)
	}
	scens := []scen{
		{"serial", withTraced(withLocker(pick(notH0))), func(s libSpec, k string) (sample, error) { return serial(e, s, k, st.Serial) }},
		{"keys", withLocker(pick(keyed)), func(s libSpec, k string) (sample, error) { return keysLeft(e, s, k, keysCycles) }},
		{"parallel", pick(notH0), func(s libSpec, k string) (sample, error) { return parallel(e, s, k, st.Parallel) }},
		{"contended", withTraced(pick(isLock)), func(s libSpec, k string) (sample, error) {
			l, rt, err := openLib(e, s)
			if err != nil {
				return nil, err
			}
			smp, err := contended(e, s.name, func(int) handle { return l.handle(k) }, l.close, rt, 16, st.Contended)
			if tl, ok := l.(*tracedLib); ok && err == nil {
				maps.Copy(smp, tl.spans().figures())
			}
			return smp, err
		}},
		{"xproc", withTraced(pick(isLock)), func(s libSpec, k string) (sample, error) { return crossProcess(e, s, k, 2, 8, st.CrossProcess) }},
		{"handoff", append(pick(isLockNotH0), pickFIFO()...), func(s libSpec, k string) (sample, error) {
			smp, err := handoff(e, s, k, st.HandoffRounds)
			if err == nil {
				p50, p99, err := pingRTT(e, 500)
				if err != nil {
					return nil, err
				}
				smp["ping_p50_us"], smp["ping_p99_us"] = us(p50), us(p99)
			}
			return smp, err
		}},
	}
	for _, sc := range scens {
		if !want(sc.name) || len(sc.libs) == 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "%s (%d libs x %d repeats)\n", sc.name, len(sc.libs), st.Reps)
		for r := range st.Reps {
			// Rotate the order each repeat: A B C, B C A, ... so no lib
			// always runs first, or right after the same neighbour.
			for i := range sc.libs {
				spec := sc.libs[(i+r)%len(sc.libs)]
				s, err := sc.f(spec, e.key(sc.name, spec.name, r))
				if err != nil {
					return fmt.Errorf("%s %s: %w", sc.name, spec.name, err)
				}
				rep.add(sc.name, spec.name, s)
			}
		}
	}
	if want("primitives") && (len(onlyLibs) == 0 || slices.Contains(onlyLibs, "dsync")) {
		fmt.Fprintln(os.Stderr, "primitives")
		for r := range st.Reps {
			// Each primitive runs right beside a run of the reference (in
			// alternating order) and its throughput is divided by that
			// run's: on a shared machine the load drifts over seconds, and
			// a ratio of runs far apart would measure the drift.
			for i := range prims[1:] {
				p := prims[1+(i+r)%(len(prims)-1)]
				if *primsFlag != "" && !slices.Contains(strings.Split(*primsFlag, ","), p.name) {
					continue
				}
				pair := []prim{prims[0], p} // prims[0] is refPrim
				if (i+r)%2 == 1 {
					pair[0], pair[1] = p, prims[0]
				}
				got := map[string]sample{}
				for _, q := range pair {
					s, err := runPrim(e, q, e.key("prim", fmt.Sprintf("%s:%d", q.name, i), r), st.Contended)
					if err != nil {
						return fmt.Errorf("%s: %w", q.name, err)
					}
					got[q.name] = s
				}
				ref, s := got[refPrim], got[p.name]
				if ref["acq_s"] > 0 {
					s["vs_mutex_h0"] = s["acq_s"] / ref["acq_s"]
					ref["vs_mutex_h0"] = 1
				}
				rep.add("primitives", refPrim, ref)
				rep.add("primitives", p.name, s)
			}
		}
	}
	if want("notice") && (len(onlyLibs) == 0 || slices.Contains(onlyLibs, "dsync")) {
		fmt.Fprintf(os.Stderr, "notice (%d rounds of each of %s x %d repeats)\n", st.NoticeRounds, strings.Join(noticeKinds, ", "), st.Reps)
		for r := range st.Reps {
			got, err := notice(e, e.key("notice", "dsync", r), st.NoticeRounds)
			if err != nil {
				return fmt.Errorf("notice: %w", err)
			}
			for _, kind := range noticeKinds {
				rep.add("notice", kind, got[kind])
			}
		}
	}
	if want("scale") && (len(onlyLibs) == 0 || slices.Contains(onlyLibs, "dsync")) {
		fmt.Fprintln(os.Stderr, "scale")
		s, err := scale(e, st)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		rep.add("scale", "dsync", s)
	}
	rep.Elapsed = time.Since(start).Round(time.Second).String()
	md := rep.markdown()
	fmt.Print(md)
	return rep.write(outDir, md)
}

func scale(e *env, st settings) (sample, error) {
	k, err := startChild(e, "-child=scale", "-addr="+e.addr, fmt.Sprintf("-n=%d", st.ScaleLocks), "-hold="+st.ScaleHold.String())
	if err != nil {
		return nil, err
	}
	defer k.wait()
	line, err := k.expect("result")
	if err != nil {
		return nil, err
	}
	var s sample
	if err := jsonUnmarshal(line, &s); err != nil {
		return nil, err
	}
	return s, nil
}

func startSpinners(self string) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range runtime.NumCPU() {
		c := exec.Command(self, "-child=spin")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

type machine struct {
	Date string `json:"date"`
	// Commit is the commit of the tree the run measured (git rev-parse
	// --short HEAD, "-dirty" when tracked files differed from it).
	Commit string `json:"commit,omitempty"`
	NProc  int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Go     string `json:"go"`
	Redis  string `json:"redis"`
	OS     string `json:"os"`
	Kernel string `json:"kernel"`
}

func machineInfo(ctl rueidis.Client) machine {
	m := machine{Date: time.Now().UTC().Format(time.RFC3339), NProc: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if inf, err := info(context.Background(), ctl, "server"); err == nil {
		m.Redis = inf["redis_version"]
	}
	m.Commit = gitCommit()
	return m
}

// gitCommit names the commit of the working tree the bench builds dsync
// from (replace ../), "" outside a git checkout.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}
