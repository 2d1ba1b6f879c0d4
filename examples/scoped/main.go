// Command scoped shows a critical section bounded by its lock context.
//
// A job holds a dsync.Mutex and works in steps, each ending in a write to a
// store. The job checks the lock context before each step, so it stops as
// soon as the lock is lost. But a step already under way cannot be called
// back: its write may land after another worker took the lock. The store
// therefore accepts a write only with a fencing token at least as large as
// every token it has seen, and the late write is rejected.
//
// Here the loss is forced by an operator ("dsync unlock --force" does the
// same), while the job's worker keeps renewing: the worst case, since the
// job learns of the loss only at its next renewal.
//
//	go run ./examples/scoped                # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/scoped
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/examples/internal/exredis"
)

// FencedStore stands for a database that remembers the largest fencing
// token it has seen and rejects writes that carry a smaller one.
type FencedStore struct {
	mu    sync.Mutex
	max   uint64
	value string
	log   []string
}

var errStale = errors.New("stale fencing token")

func (s *FencedStore) Write(token uint64, who, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.max {
		s.log = append(s.log, fmt.Sprintf("REJECTED %-8s %-10s token %d < %d", who, value, token, s.max))
		return errStale
	}
	s.max, s.value = token, value
	s.log = append(s.log, fmt.Sprintf("accepted %-8s %-10s token %d", who, value, token))
	return nil
}

// job runs steps while it holds m. Each step does slow work that cannot be
// interrupted (work(i)) and then writes; the lock context is checked
// between steps. done(i) is called when step i has written (done(0): the
// lock is held).
func job(ctx context.Context, out io.Writer, m *dsync.Mutex, who string, steps int, work func(step int), store *FencedStore, done func(step int)) error {
	lctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	defer m.UnlockContext(lctx) // ErrNotHeld after a loss: nothing to undo
	token, _ := dsync.FencingToken(lctx)
	fmt.Fprintf(out, "%s: holds the lock, fencing token %d\n", who, token)
	done(0)
	for i := 1; i <= steps; i++ {
		if lctx.Err() != nil {
			fmt.Fprintf(out, "%s: stops before step %d: %v\n", who, i, context.Cause(lctx))
			return context.Cause(lctx)
		}
		work(i) // a step that, once started, runs to its end
		if err := store.Write(token, who, fmt.Sprintf("step %d", i)); err != nil {
			fmt.Fprintf(out, "%s: write of step %d refused: %v\n", who, i, err)
		}
		done(i)
	}
	return nil
}

func main() {
	if _, err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// lockedWriter lets both workers print to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func run(w io.Writer) (*FencedStore, error) {
	out := &lockedWriter{w: w}
	srv, err := exredis.Start()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	fmt.Fprintln(out, "server:", srv.Describe())
	prefix := fmt.Sprintf("scoped-example-%d-%d", os.Getpid(), time.Now().UnixNano())
	// Two Clients, as two processes would have. A short lease makes the
	// holder notice the loss within lease/3, but a lease must outlast
	// several round trips: the embedded server, under the race detector on
	// a loaded 2-core machine (make test), took up to 0.2 s for an
	// acquisition and 0.3 s for a renewal, so with 600 ms a worker now and
	// then lost its lock before the operator forced it free.
	var clients []*dsync.Client
	for i := range 2 {
		rc, err := srv.Client()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		if i == 0 {
			// After every Client is closed: leave nothing behind.
			defer exredis.Forget(context.Background(), rc, prefix+":*")
		}
		c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(2*time.Second))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients = append(clients, c)
	}
	c1, c2 := clients[0], clients[1]

	store := &FencedStore{}
	ctx := context.Background()
	var wg sync.WaitGroup
	// A job's error other than the expected loss is printed.
	report := func(who string, err error) {
		if err != nil && !errors.Is(err, dsync.ErrLockLost) {
			fmt.Fprintf(out, "%s: %v\n", who, err)
		}
	}
	held, step1, w1 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	wrote, w2 := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		defer close(w1)
		// Step 2 is the one the operator interrupts, and it is slow (a
		// long query, a pause): it runs until worker-2 has written, so its
		// write comes late however fast or slow the machine. worker-1
		// stops at its first check after it learns of the loss, well
		// before its last step.
		work := func(step int) {
			time.Sleep(150 * time.Millisecond)
			if step == 2 {
				reached(wrote, w2)
			}
		}
		report("worker-1", job(ctx, out, c1.NewMutex("report"), "worker-1", 30, work, store, func(step int) {
			switch step {
			case 0:
				close(held)
			case 1:
				close(step1)
			}
		}))
	})
	// worker-1 first; worker-2 waits for the lock.
	if !reached(held, w1) {
		return store, errors.New("worker-1 ended without the lock")
	}
	wg.Go(func() {
		defer close(w2)
		work := func(int) { time.Sleep(10 * time.Millisecond) }
		report("worker-2", job(ctx, out, c2.NewMutex("report"), "worker-2", 2, work, store, func(step int) {
			if step == 1 {
				close(wrote)
			}
		}))
	})

	// worker-1 is inside its second step when the operator forces the lock
	// free; worker-2, waiting, takes it with a larger token.
	if !reached(step1, w1) {
		return store, errors.New("worker-1 ended before its first step")
	}
	fmt.Fprintln(out, "operator: forcing the lock free")
	if _, err := c2.ForceUnlock(ctx, "report"); err != nil {
		return nil, err
	}
	wg.Wait()

	fmt.Fprintln(out, "\nstore log:")
	for _, l := range store.log {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintf(out, "final value %q written with token %d\n", store.value, store.max)
	return store, nil
}

// reached waits for event and reports whether it came before the worker
// ended.
func reached(event, ended <-chan struct{}) bool {
	select {
	case <-event:
		return true
	case <-ended:
		select {
		case <-event:
			return true
		default:
			return false
		}
	}
}
