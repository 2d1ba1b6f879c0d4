package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsync/dsync/dsync"
)

// The primitives scenario measures what issue 12 sets targets for: each
// FIFO primitive on one name, 16 goroutines of one process, beside a dsync
// Mutex with WithMaxLocalHandoffs(0) in the same repeat. Per acquisition it
// counts the acquire scripts (the observer's AcquireDone.Attempts), the
// client round trips (countingClient: one per command or pipeline sent and
// awaited, on the shared connections and the dedicated pub/sub one), and
// the Redis commands (INFO commandstats after a CONFIG RESETSTAT, commands
// run inside scripts included).

type locker interface {
	LockContext(context.Context) (context.Context, error)
	UnlockContext(context.Context) error
}

// refPrim is the row every primitive's throughput is divided by.
const refPrim = "Mutex h0"

type prim struct {
	name string
	note string
	// handoffs is the Client's WithMaxLocalHandoffs.
	handoffs int
	// mk returns goroutine i's handle on the primitive called key.
	mk func(c *dsync.Client, key string) func(i int) handle
}

var prims = []prim{
	{refPrim, "dsync Mutex, WithMaxLocalHandoffs(0), the reference", 0, func(c *dsync.Client, key string) func(int) handle {
		return func(int) handle { return &lockerHandle{l: c.NewMutex(key)} }
	}},
	{"FairMutex", "dsync FairMutex", dsync.DefaultMaxLocalHandoffs, func(c *dsync.Client, key string) func(int) handle {
		f := c.NewFairMutex(key)
		return func(int) handle { return &lockerHandle{l: f} }
	}},
	{"RWMutex writers", "dsync RWMutex, Lock only", dsync.DefaultMaxLocalHandoffs, func(c *dsync.Client, key string) func(int) handle {
		rw := c.NewRWMutex(key)
		return func(int) handle { return &rwHandle{l: rw, readPct: 0} }
	}},
	{"RWMutex 90% readers", "dsync RWMutex, 90% RLock", dsync.DefaultMaxLocalHandoffs, func(c *dsync.Client, key string) func(int) handle {
		rw := c.NewRWMutex(key)
		return func(int) handle { return &rwHandle{l: rw, readPct: 90} }
	}},
	{"Semaphore 1", "dsync Semaphore size 1, n = 1", dsync.DefaultMaxLocalHandoffs, func(c *dsync.Client, key string) func(int) handle {
		s := c.NewSemaphore(key, 1)
		return func(int) handle { return &semHandle{s: s} }
	}},
	{"Semaphore 4", "dsync Semaphore size 4, n = 1", dsync.DefaultMaxLocalHandoffs, func(c *dsync.Client, key string) func(int) handle {
		s := c.NewSemaphore(key, 4)
		return func(int) handle { return &semHandle{s: s} }
	}},
}

type lockerHandle struct {
	l    locker
	lctx context.Context
}

func (h *lockerHandle) Lock(ctx context.Context) (err error) {
	h.lctx, err = h.l.LockContext(ctx)
	return err
}
func (h *lockerHandle) Unlock(context.Context) error { return h.l.UnlockContext(h.lctx) }

type rwHandle struct {
	l       *dsync.RWMutex
	readPct int
	lctx    context.Context
	read    bool
}

func (h *rwHandle) Lock(ctx context.Context) (err error) {
	h.read = rand.IntN(100) < h.readPct
	if h.read {
		h.lctx, err = h.l.RLockContext(ctx)
	} else {
		h.lctx, err = h.l.LockContext(ctx)
	}
	return err
}

func (h *rwHandle) Unlock(context.Context) error {
	if h.read {
		return h.l.RUnlockContext(h.lctx)
	}
	return h.l.UnlockContext(h.lctx)
}

type semHandle struct {
	s    *dsync.Semaphore
	lctx context.Context
}

func (h *semHandle) Lock(ctx context.Context) (err error) {
	h.lctx, err = h.s.Acquire(ctx, 1)
	return err
}
func (h *semHandle) Unlock(context.Context) error { return h.s.Release(h.lctx, 1) }

// runPrim runs p like the contended scenario (16 goroutines, one key, one
// process, for d) on a Client of its own, and counts its costs.
func runPrim(e *env, p prim, key string, d time.Duration) (sample, error) {
	var attempts, observed atomic.Int64
	obs := dsync.Observer{AcquireDone: func(_ context.Context, ev dsync.AcquireDone) {
		attempts.Add(int64(ev.Attempts))
		if ev.Acquired {
			observed.Add(1)
		}
	}}
	rt := new(atomic.Int64)
	rc, err := newRueidis(e.addr, rt)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	c, err := dsync.NewClient(rc, dsync.WithMaxLocalHandoffs(p.handoffs), dsync.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	mk := p.mk(c, key)
	handles := make([]handle, 16)
	for i := range handles {
		handles[i] = mk(i)
	}
	for range 20 { // scripts loaded, the wakeup channel subscribed
		if err := lockOnce(handles[0]); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	// Nothing else uses this Redis during the run: the counts are this
	// primitive's, and background work (renewals, pub/sub) counts too.
	if err := e.ctl.Do(ctx, e.ctl.B().ConfigResetstat().Build()).Error(); err != nil {
		return nil, err
	}
	attempts.Store(0)
	observed.Store(0)
	rcpu0, err := redisCPU(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuTime()
	rt0 := rt.Load()
	res := work(handles, time.Now().Add(d))
	res.RT = rt.Load() - rt0
	cpu := cpuTime() - cpu0
	rcpu1, err := redisCPU(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	st, err := commandStats(ctx, e.ctl)
	if err != nil {
		return nil, err
	}
	if res.Errs > 0 {
		fmt.Fprintf(os.Stderr, "  %s: %d errors, first: %s\n", p.name, res.Errs, res.FirstErr)
	}
	s := summarize(res, d, st.total())
	if n := float64(res.Total); n > 0 {
		s["scripts_acq"] = float64(attempts.Load()) / n
		s["observed_acq"] = float64(observed.Load())
		s["acquisitions"] = n
		s["evalsha_acq"] = float64(st["evalsha"]+st["eval"]) / n
		s["publish_acq"] = float64(st["publish"]+st["spublish"]) / n
		s["subscribe_acq"] = float64(st["subscribe"]+st["ssubscribe"]) / n
		// What an acquisition costs the two CPUs that carry both sides:
		// this process's and Redis's CPU time per acquisition.
		s["client_cpu_us_acq"] = us(cpu) / n
		s["redis_cpu_us_acq"] = (rcpu1 - rcpu0) * 1e6 / n
	}
	return s, nil
}

// childScale holds n dsync locks for hold and reports renewal CPU and
// Redis memory per lock.
func childScale(addr string, n int, hold time.Duration) error {
	rt := new(atomic.Int64)
	rc, err := newRueidis(addr, rt)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The observer tells why locks are lost, if any are: failed renewal
	// rounds (and their first error) or leases that ran out.
	var renewFailed atomic.Int64
	var firstRenewErr atomic.Value
	obs := dsync.Observer{RenewFailed: func(e dsync.RenewFailed) {
		renewFailed.Add(1)
		firstRenewErr.CompareAndSwap(nil, e.Err.Error())
	}}
	c, err := dsync.NewClient(rc, dsync.WithLease(3*time.Second), dsync.WithKeyPrefix("scale"), dsync.WithObserver(obs))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	mem0, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	type held struct {
		m    *dsync.Mutex
		lctx context.Context
	}
	locks := make([]held, n)
	acqStart := time.Now()
	if err := parallelFor(n, 64, func(i int) error {
		m := c.NewMutex(fmt.Sprintf("scale:%d", i))
		lctx, err := m.LockContext(ctx)
		locks[i] = held{m, lctx}
		return err
	}); err != nil {
		return fmt.Errorf("acquiring: %w", err)
	}
	acqTime := time.Since(acqStart)
	mem1, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	rcpu0, _ := redisCPU(ctx, rc)
	rt0 := rt.Load()
	cpu0, wall0 := cpuTime(), time.Now()
	time.Sleep(hold) // the measured window: only the watchdog runs
	cpu1, wall := cpuTime(), time.Since(wall0)
	rts := rt.Load() - rt0
	rcpu1, _ := redisCPU(ctx, rc)
	lost := 0
	for _, h := range locks {
		if h.lctx.Err() != nil {
			lost++
		}
	}
	// A lock lost during the window fails its release with ErrNotHeld;
	// count those instead of stopping.
	var unlockErrs atomic.Int64
	_ = parallelFor(n, 64, func(i int) error {
		if err := locks[i].m.UnlockContext(locks[i].lctx); err != nil {
			if unlockErrs.Add(1) == 1 {
				fmt.Fprintf(os.Stderr, "scale: first failed release (of a lost lock?): %v\n", err)
			}
		}
		return nil
	})
	if v := firstRenewErr.Load(); v != nil {
		fmt.Fprintf(os.Stderr, "scale: %d renewal batches failed, first: %v\n", renewFailed.Load(), v)
	}
	fmt.Printf("result {\"renew_failed\":%d,\"locks\":%d,\"acquire_s\":%.3f,\"window_s\":%.3f,\"cpu_pct\":%.3f,\"redis_cpu_pct\":%.3f,\"bytes_lock\":%.1f,\"renew_rt_s\":%.1f,\"lost\":%d,\"unlock_errors\":%d}\n",
		renewFailed.Load(), n, acqTime.Seconds(), wall.Seconds(), 100*(cpu1-cpu0).Seconds()/wall.Seconds(),
		100*(rcpu1-rcpu0)/wall.Seconds(), float64(mem1-mem0)/float64(n), float64(rts)/wall.Seconds(), lost, unlockErrs.Load())
	return nil
}

func parallelFor(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
