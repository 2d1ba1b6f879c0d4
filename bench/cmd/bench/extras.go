package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsync/dsync/dsync"
)

// The other dsync primitives are found by reflection, so the bench builds
// (and skips them) while they do not exist yet, and measures them as soon
// as they do, without an edit here.

type locker interface {
	LockContext(context.Context) (context.Context, error)
	UnlockContext(context.Context) error
}

type rwLocker interface {
	locker
	RLockContext(context.Context) (context.Context, error)
	RUnlockContext(context.Context) error
}

type weighted interface {
	Acquire(ctx context.Context, n int64) (context.Context, error)
	Release(ctx context.Context, n int64) error
}

// newPrimitive calls c.<method>(args...) if the method exists.
func newPrimitive(c *dsync.Client, method string, args ...any) (any, bool) {
	m := reflect.ValueOf(c).MethodByName(method)
	if !m.IsValid() {
		return nil, false
	}
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		in[i] = reflect.ValueOf(a)
	}
	out := m.Call(in)
	if len(out) == 0 {
		return nil, false
	}
	return out[0].Interface(), true
}

type extra struct {
	name string
	note string
	// mk returns a handle factory on c for key, or false if the primitive
	// is missing.
	mk func(c *dsync.Client, key string) (func(i int) handle, bool)
}

var extras = []extra{
	{"FairMutex", "dsync FairMutex, 16 goroutines, one key", func(c *dsync.Client, key string) (func(int) handle, bool) {
		p, ok := newPrimitive(c, "NewFairMutex", key)
		l, ok2 := p.(locker)
		if !ok || !ok2 {
			return nil, false
		}
		return func(int) handle { return &lockerHandle{l: l} }, true
	}},
	{"RWMutex", "dsync RWMutex, 16 goroutines, 80% RLock", func(c *dsync.Client, key string) (func(int) handle, bool) {
		p, ok := newPrimitive(c, "NewRWMutex", key)
		l, ok2 := p.(rwLocker)
		if !ok || !ok2 {
			return nil, false
		}
		return func(int) handle { return &rwHandle{l: l} }, true
	}},
	{"Semaphore", "dsync Semaphore size 4, 16 goroutines, n=1", func(c *dsync.Client, key string) (func(int) handle, bool) {
		p, ok := newPrimitive(c, "NewSemaphore", key, int64(4))
		s, ok2 := p.(weighted)
		if !ok || !ok2 {
			return nil, false
		}
		return func(int) handle { return &semHandle{s: s} }, true
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
	l    rwLocker
	lctx context.Context
	read bool
}

func (h *rwHandle) Lock(ctx context.Context) (err error) {
	h.read = rand.IntN(10) < 8
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
	s    weighted
	lctx context.Context
}

func (h *semHandle) Lock(ctx context.Context) (err error) {
	h.lctx, err = h.s.Acquire(ctx, 1)
	return err
}
func (h *semHandle) Unlock(context.Context) error { return h.s.Release(h.lctx, 1) }

// runExtra runs one extra primitive like the contended scenario; ok is
// false when the primitive does not exist.
func runExtra(e *env, x extra, key string, d time.Duration) (s sample, ok bool, err error) {
	spec, _ := specByName("dsync")
	l, rt, err := openLib(e, spec)
	if err != nil {
		return nil, false, err
	}
	mk, ok := x.mk(l.(*dsyncLib).c, key)
	if !ok {
		l.close()
		return nil, false, nil
	}
	s, err = contended(e, x.name, mk, l.close, rt, 16, d)
	return s, true, err
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
