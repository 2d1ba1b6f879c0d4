package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
)

// exampleClient returns a Client on an in-process server (dsynctest), so
// that the examples run anywhere. A program would connect to its Redis
// instead:
//
//	c, err := dsync.Dial(ctx, "redis://127.0.0.1:6379")
func exampleClient(opts ...dsync.Option) (c *dsync.Client, stop func()) {
	cs, stop := exampleClients(1, opts...)
	return cs[0], stop
}

// exampleClients returns n Clients on one in-process server, each with
// connections of its own, as n processes would have.
func exampleClients(n int, opts ...dsync.Option) (cs []*dsync.Client, stop func()) {
	srv, err := dsynctest.StartEmbedded()
	if err != nil {
		log.Fatal(err)
	}
	for range n {
		c, err := srv.Dial(context.Background(), opts...)
		if err != nil {
			log.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs, func() {
		for _, c := range cs {
			c.Close()
		}
		srv.Close()
	}
}

// A dsync.Mutex is a sync.Locker: code written against sync.Locker works
// unchanged, with the lock now shared by every process using the name.
func ExampleMutex() {
	c, stop := exampleClient()
	defer stop()

	var mu sync.Locker = c.NewMutex("counter") // was: &sync.Mutex{}
	n := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println(n)
	// Output: 20
}

// LockContext returns the lock context: it ends when the lock is released
// or lost, so work bounded by it stops with the lock, and it carries the
// fencing token to hand to the storage the work writes to.
func ExampleMutex_LockContext() {
	c, stop := exampleClient()
	defer stop()
	m := c.NewMutex("report")

	lctx, err := m.LockContext(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	token, _ := dsync.FencingToken(lctx)
	fmt.Println("have a fencing token:", token > 0)

	// Another owner cannot take it meanwhile; that is not an error.
	_, ok, err := m.TryLockContext(context.Background())
	fmt.Println("taken by another owner:", ok, err)

	if err := m.UnlockContext(lctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("lock context ended:", lctx.Err() != nil, errors.Is(context.Cause(lctx), dsync.ErrLockLost))
	// Output:
	// have a fencing token: true
	// taken by another owner: false <nil>
	// lock context ended: true false
}

// A wait is bounded by its context; it leaves nothing behind.
func ExampleMutex_LockContext_timeout() {
	c, stop := exampleClient()
	defer stop()
	m := c.NewMutex("busy")
	held, err := m.LockContext(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer m.UnlockContext(held)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = m.LockContext(ctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}

// Acquisitions whose contexts carry the same owner re-enter the lock.
func ExampleWithOwner() {
	c, stop := exampleClient()
	defer stop()
	m := c.NewMutex("tree")
	ctx := dsync.WithOwner(context.Background())

	outer, _ := m.LockContext(ctx)
	inner, err := m.LockContext(outer) // same owner: re-enters at once
	fmt.Println("re-entered:", err == nil)
	_ = m.UnlockContext(inner)
	fmt.Println("still held after one release:", outer.Err() == nil)
	_ = m.UnlockContext(outer)
	fmt.Println("held after both:", outer.Err() == nil)
	// Output:
	// re-entered: true
	// still held after one release: true
	// held after both: false
}

// A FairMutex is granted in arrival order, across processes.
func ExampleFairMutex() {
	c, stop := exampleClient()
	defer stop()
	f := c.NewFairMutex("queue")

	f.Lock()
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			f.Lock()
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			f.Unlock()
		})
		// Let waiter i queue before waiter i+1 arrives.
		for {
			st, _ := c.Inspect(context.Background(), "queue")
			if len(st) == 1 && len(st[0].Waiters) == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	f.Unlock()
	wg.Wait()
	fmt.Println(order)
	// Output: [0 1 2]
}

// Readers share an RWMutex; a writer excludes them.
func ExampleRWMutex() {
	c, stop := exampleClient()
	defer stop()
	rw := c.NewRWMutex("config")
	ctx := context.Background()

	r1, _ := rw.RLockContext(ctx)
	r2, err := rw.RLockContext(ctx)
	fmt.Println("two readers:", err == nil)
	fmt.Println("writer while read:", rw.TryLock())
	_ = rw.RUnlockContext(r1)
	_ = rw.RUnlockContext(r2)
	fmt.Println("writer when free:", rw.TryLock())
	rw.Unlock()
	// Output:
	// two readers: true
	// writer while read: false
	// writer when free: true
}

// A Semaphore bounds how many permits are held at once across processes.
func ExampleSemaphore() {
	c, stop := exampleClient()
	defer stop()
	sem := c.NewSemaphore("db-connections", 3)
	ctx := context.Background()

	a, _ := sem.Acquire(ctx, 2)
	_, ok, _ := sem.TryAcquire(ctx, 2)
	fmt.Println("2 more of 3 while 2 held:", ok)
	_, err := sem.Acquire(ctx, 4)
	fmt.Println("more than the size:", errors.Is(err, dsync.ErrInvalidArgument))
	_ = sem.Release(a, 2)
	b, ok, _ := sem.TryAcquire(ctx, 3)
	fmt.Println("all 3 when free:", ok)
	_ = sem.Release(b, 3)
	// Output:
	// 2 more of 3 while 2 held: false
	// more than the size: true
	// all 3 when free: true
}

// Semaphore.Locker makes a semaphore a sync.Locker: here a pool of 4 slots
// shared by two Clients (two processes, in production), each running 4
// workers that take a slot per job.
func ExampleSemaphore_Locker() {
	cs, stop := exampleClients(2)
	defer stop()

	var busy, most, jobs atomic.Int64
	var wg sync.WaitGroup
	for _, c := range cs {
		var slot sync.Locker = c.NewSemaphore("workers", 4).Locker(1)
		for range 4 {
			wg.Go(func() {
				for range 3 {
					slot.Lock()
					n := busy.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					jobs.Add(1) // the job
					busy.Add(-1)
					slot.Unlock()
				}
			})
		}
	}
	wg.Wait()
	fmt.Println("jobs done:", jobs.Load())
	fmt.Println("at most 4 at once:", most.Load() <= 4)
	// Output:
	// jobs done: 24
	// at most 4 at once: true
}

// Once runs f successfully at most once per name, in any process; a
// failed run lets the next caller try.
func ExampleOnce() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	runs := 0
	migrate := func(context.Context) error {
		runs++
		if runs == 1 {
			return errors.New("database not ready")
		}
		return nil
	}
	for range 3 {
		err := c.NewOnce("migrate-v2").Do(ctx, migrate)
		fmt.Println("err:", err)
	}
	fmt.Println("runs:", runs)
	// Output:
	// err: database not ready
	// err: <nil>
	// err: <nil>
	// runs: 2
}

// OnceValue computes a value once and gives every process the same one.
func ExampleOnceValue() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	calls := 0
	seed := dsync.OnceValue(c, "seed", func(context.Context) (int, error) {
		calls++
		return 42, nil
	})
	v1, _ := seed(ctx)
	v2, _ := seed(ctx)
	fmt.Println(v1, v2, calls)
	// Output: 42 42 1
}

// Inspect shows who holds a lock and who waits for it.
func ExampleClient_Inspect() {
	c, stop := exampleClient()
	defer stop()
	ctx := dsync.WithOwner(context.Background())
	lctx, _ := c.NewMutex("orders").LockContext(ctx)
	defer c.NewMutex("orders").UnlockContext(lctx)

	states, err := c.Inspect(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}
	owner, _ := dsync.OwnerOf(ctx)
	for _, s := range states {
		h := s.Holders[0]
		fmt.Println(s.Kind, s.Name, h.Owner == owner, h.Count, h.Lease > 0)
	}
	// Output: mutex orders true 1 true
}

// A WaitGroup waits for work done anywhere: Add before handing work out,
// Done when a piece is finished, Wait until the counter is zero.
func ExampleWaitGroup() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	wg := c.NewWaitGroup("batch-7")
	if err := wg.Add(ctx, 3); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		go func() { _ = wg.Done(ctx) }() // in other processes, typically
	}
	fmt.Println(wg.Wait(ctx))
	// Output: <nil>
}

// A MultiLock takes several locks, all or none, in an order every process
// agrees on, so two callers naming them in opposite orders cannot deadlock.
func ExampleClient_NewMultiLock() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	transfer := c.NewMultiLock([]string{"account:1", "account:2"})
	lctx, err := transfer.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, ok, _ := c.NewMutex("account:2").TryLockContext(ctx)
	fmt.Println("account:2 free while transferring:", ok)
	if err := transfer.UnlockContext(lctx); err != nil {
		log.Fatal(err)
	}
	_, ok, _ = c.NewMutex("account:2").TryLockContext(ctx)
	fmt.Println("account:2 free after:", ok)
	// Output:
	// account:2 free while transferring: false
	// account:2 free after: true
}
