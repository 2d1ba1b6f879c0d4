package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// The instr mode (-instr): the instructions redis-server executes per
// uncontended lock+unlock cycle, counted by valgrind's callgrind, so the
// figure does not depend on the machine's load or clock (Redis CPU per op
// in the parallel scenario moves with both). For each lib a private
// redis-server runs under callgrind; one goroutine runs 1,000 warm-up
// cycles over 1,000 names, the counters are zeroed (callgrind_control -z),
// then n cycles run over the same names and the counters are dumped. Only
// what processInputBuffer runs is counted: parsing the commands and running
// them, commands run by scripts included; not the event loop, the kernel's
// network work (about the same per command for every lib) nor serverCron
// and active expiry (which follow wall time, and valgrind slows it ~50x).

const instrNames = 1000

func runInstr(libNames []string, n int, valgrind, redisBin string) error {
	if len(libNames) == 0 {
		libNames = []string{"dsync", "raw"}
	}
	fmt.Printf("| lib | Redis instructions per lock+unlock cycle | vs raw | of which in Lua (lua_pcall, incl. the commands scripts call) | commands scripts call (scriptCall) |\n| --- | ---: | ---: | ---: | ---: |\n")
	// raw first, so that each row can show its ratio as soon as it is done.
	if i := slices.Index(libNames, "raw"); i > 0 {
		libNames = append([]string{"raw"}, slices.Delete(slices.Clone(libNames), i, i+1)...)
	}
	var raw float64
	for _, name := range libNames {
		spec, err := instrSpecByName(name)
		if err != nil {
			return err
		}
		r, err := instrOne(spec, n, valgrind, redisBin)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if name == "raw" {
			raw = r[0]
		}
		vs := "-"
		if raw > 0 {
			vs = fmt.Sprintf("%.2fx", r[0]/raw)
		}
		fmt.Printf("| %s | %.0f | %s | %.0f | %.0f |\n", name, r[0], vs, r[1], r[2])
	}
	return nil
}

// instrOne returns instructions per cycle: in all, inside lua_pcall, inside
// scriptCall (inclusive counts).
func instrOne(spec libSpec, n int, valgrind, redisBin string) ([3]float64, error) {
	var zero [3]float64
	srv, err := startCallgrind(valgrind, redisBin)
	if err != nil {
		return zero, err
	}
	defer srv.stop()
	l, err := spec.open(srv.addr, new(atomic.Int64))
	if err != nil {
		return zero, err
	}
	defer l.close()
	handles := make([]handle, instrNames)
	for i := range handles {
		handles[i] = l.handle("instr" + strconv.Itoa(i))
	}
	cycles := func(k int) error {
		ctx := context.Background()
		for i := range k {
			h := handles[i%instrNames]
			if err := h.Lock(ctx); err != nil {
				return err
			}
			if err := h.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	if err := cycles(instrNames); err != nil {
		return zero, err
	}
	if err := srv.zero(); err != nil {
		return zero, err
	}
	if err := cycles(n); err != nil {
		return zero, err
	}
	r, err := srv.dump(spec.name)
	if err != nil {
		return zero, err
	}
	for i := range r {
		r[i] /= float64(n)
	}
	return r, nil
}

// A callgrindServer is a private redis-server run under callgrind, counting
// only what processInputBuffer runs.
type callgrindServer struct {
	*redisServer
	pid string
	out string
}

func startCallgrind(valgrind, redisBin string) (*callgrindServer, error) {
	dir, err := os.MkdirTemp("", "dsync-bench-instr")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command(valgrind, "--tool=callgrind", "--toggle-collect=processInputBuffer", "--callgrind-out-file="+out, redisBin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv := &callgrindServer{redisServer: &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd}, pid: strconv.Itoa(cmd.Process.Pid), out: out}
	if err := srv.waitReadyWithin(60 * time.Second); err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

func (s *callgrindServer) stop() {
	s.redisServer.stop()
	os.RemoveAll(s.dir)
}

// zero zeroes the counters.
func (s *callgrindServer) zero() error {
	if b, err := exec.Command("callgrind_control", "-z", s.pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -z: %v: %s", err, b)
	}
	return nil
}

// dump returns the instructions counted since zero: in all, inside
// lua_pcall, inside scriptCall (inclusive counts). name names the
// annotation DSYNC_BENCH_ANNOTATE keeps.
func (s *callgrindServer) dump(name string) ([3]float64, error) {
	var zero [3]float64
	ann, err := s.annotate(name)
	if err != nil {
		return zero, err
	}
	var r [3]float64
	sc := bufio.NewScanner(strings.NewReader(string(ann)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(sc.Text(), "PROGRAM TOTALS"):
			r[0] = v
		case strings.HasSuffix(f[2], ":lua_pcall") && r[1] == 0:
			r[1] = v
		case strings.HasSuffix(f[2], ":scriptCall") && r[2] == 0:
			r[2] = v
		}
	}
	if r[0] == 0 {
		return zero, fmt.Errorf("no totals in the callgrind dump")
	}
	return r, nil
}

// annotate dumps the counters and returns callgrind_annotate's inclusive
// annotation of the dump, which it then deletes (so that the next dump is
// the only one). name names the annotation DSYNC_BENCH_ANNOTATE keeps.
func (s *callgrindServer) annotate(name string) ([]byte, error) {
	if b, err := exec.Command("callgrind_control", "-d", s.pid).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("callgrind_control -d: %v: %s", err, b)
	}
	dumps, _ := filepath.Glob(s.out + ".*")
	if len(dumps) != 1 {
		return nil, fmt.Errorf("%d callgrind dumps in %s, want 1", len(dumps), s.dir)
	}
	defer os.Remove(dumps[0])
	ann, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", dumps[0]).Output()
	if err != nil {
		return nil, fmt.Errorf("callgrind_annotate: %w", err)
	}
	if d := os.Getenv("DSYNC_BENCH_ANNOTATE"); d != "" {
		// The whole annotation, for a look at where the instructions go.
		_ = os.WriteFile(filepath.Join(d, "instr-"+name+".txt"), ann, 0o644)
		if raw, err := os.ReadFile(dumps[0]); err == nil {
			_ = os.WriteFile(filepath.Join(d, "instr-"+name+".cg"), raw, 0o644)
		}
	}
	return ann, nil
}

// instrSpecs are the other primitives' uncontended cycles, for -instr only
// (by name, beside the libs): the FairMutex (dsync-fair), an RWMutex
// writer, a Semaphore of size 1 taken 1 at a time, and a Once, each cycle
// a Once of its own name (its Do runs f, which does nothing; the record
// stays, as a Once's does).
var instrSpecs = []libSpec{
	{name: "dsync-rw", note: "dsync RWMutex, LockContext/UnlockContext (a writer)", lock: true, open: openDsyncWith(func(c *dsync.Client, key string) handle {
		return &rwHandle{l: c.NewRWMutex(key)}
	})},
	{name: "dsync-sem", note: "dsync Semaphore size 1, Acquire/Release 1", lock: true, open: openDsyncWith(func(c *dsync.Client, key string) handle {
		return &semHandle{s: c.NewSemaphore(key, 1)}
	})},
	{name: "dsync-evalsha", note: "dsync Mutex as an ACL user refused FUNCTION and FCALL: the scripts' EVALSHA fallback", lock: true, open: openDsyncEvalsha},
	{name: "dsync-try-held", note: "dsync Mutex, TryLockContext of a name another Client holds: every try is turned away in Redis, past the acquire's common case", open: openTryHeld},
	{name: "dsync-once", note: "dsync Once, one Do per cycle on a name of its own", open: openDsyncWith(func(c *dsync.Client, key string) handle {
		return &onceHandle{c: c, key: key}
	})},
}

// openDsyncEvalsha opens a default-options dsync Client as an ACL user that
// may not run FUNCTION or FCALL, as on a managed service that refuses them:
// its Mutex runs its scripts with EVALSHA.
func openDsyncEvalsha(addr string, rt *atomic.Int64) (lib, error) {
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", "nofunctions", "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall", "-fcall_ro").Build()).Error()
	admin.Close()
	if err != nil {
		return nil, err
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: "nofunctions", Password: "pw"})
	if err != nil {
		return nil, err
	}
	c, err := dsync.NewClient(&countingClient{Client: rc, rt: rt}, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs))
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &dsyncLib{rc: rc, c: c}, nil
}

// instrSpecByName finds name among instrSpecs, then the libs.
func instrSpecByName(name string) (libSpec, error) {
	for _, s := range instrSpecs {
		if s.name == name {
			return s, nil
		}
	}
	return specByName(name)
}

// dsyncWith is a default-options dsync Client whose handles mk makes.
type dsyncWith struct {
	*dsyncLib
	mk func(c *dsync.Client, key string) handle
}

func (l dsyncWith) handle(key string) handle { return l.mk(l.c, key) }

func openDsyncWith(mk func(c *dsync.Client, key string) handle) func(string, *atomic.Int64) (lib, error) {
	return func(addr string, rt *atomic.Int64) (lib, error) {
		l, err := newDsync(addr, rt, false, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs))
		if err != nil {
			return nil, err
		}
		return dsyncWith{dsyncLib: l, mk: mk}, nil
	}
}

// onceHandle's Lock runs one Once to completion, a new name each time;
// Unlock does nothing.
type onceHandle struct {
	c   *dsync.Client
	key string
	n   int
}

func (h *onceHandle) Lock(ctx context.Context) error {
	h.n++
	return h.c.NewOnce(h.key+"-"+strconv.Itoa(h.n)).Do(ctx, func(context.Context) error { return nil })
}

func (h *onceHandle) Unlock(context.Context) error { return nil }

// tryHeldLib is a Client whose handles try names that a second Client,
// the holder, holds: the acquire runs past its common case (lib.lua's
// functions) and replies that the lock is held.
type tryHeldLib struct {
	*dsyncLib
	holder *dsyncLib
}

func openTryHeld(addr string, rt *atomic.Int64) (lib, error) {
	l, err := newDsync(addr, rt, false, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs))
	if err != nil {
		return nil, err
	}
	// The holder's lease is long enough that no renewal round of its
	// holds falls among the counted tries.
	h, err := newDsync(addr, new(atomic.Int64), false, dsync.WithLease(time.Hour))
	if err != nil {
		l.close()
		return nil, err
	}
	return tryHeldLib{dsyncLib: l, holder: h}, nil
}

func (l tryHeldLib) handle(key string) handle {
	_, err := l.holder.c.NewMutex(key).LockContext(context.Background())
	return &tryHeldHandle{m: l.c.NewMutex(key), key: key, err: err}
}

func (l tryHeldLib) close() { l.dsyncLib.close(); l.holder.close() }

// tryHeldHandle's Lock is one try, which must find the lock held; Unlock
// does nothing.
type tryHeldHandle struct {
	m   *dsync.Mutex
	key string
	err error // the holder's acquisition
}

func (h *tryHeldHandle) Lock(ctx context.Context) error {
	if h.err != nil {
		return h.err
	}
	_, ok, err := h.m.TryLockContext(ctx)
	if err == nil && ok {
		err = fmt.Errorf("try-held: acquired %s, which another Client holds", h.key)
	}
	return err
}

func (h *tryHeldHandle) Unlock(context.Context) error { return nil }
