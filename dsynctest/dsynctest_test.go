package dsynctest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
	"go.uber.org/goleak"
)

// No goroutine of a Client or of the in-process server outlives a test.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// rueidis's cluster client, closed, may still sleep out the delay
		// of a topology refresh it had scheduled (singleflight DelayDo,
		// at most about a second), then return at once: rueidis's, not a
		// Client's (a clean-clone CI run of 3987fa6 caught one 874 ms in).
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// servers returns the kinds of server a test runs on: in-process always,
// redis-server when it is on PATH (required when CI is set).
func servers(t *testing.T) map[string]func() (*dsynctest.Server, error) {
	kinds := map[string]func() (*dsynctest.Server, error){"embedded": dsynctest.StartEmbedded}
	if _, err := exec.LookPath("redis-server"); err == nil {
		kinds["redis-server"] = dsynctest.Start
	} else if os.Getenv("CI") != "" {
		t.Fatalf("redis-server is not installed, and CI is set: %v", err)
	}
	return kinds
}

// TestNewClient: NewClient uses redis-server when it is on PATH, and the
// Client and server are gone when the test ends.
func TestNewClient(t *testing.T) {
	var srv *dsynctest.Server
	var c *dsync.Client
	t.Run("inner", func(t *testing.T) {
		srv = dsynctest.NewServer(t)
		c = srv.NewClient(t)
		_, err := exec.LookPath("redis-server")
		if srv.Embedded != (err != nil) {
			t.Fatalf("Embedded %v with redis-server on PATH: %v", srv.Embedded, err == nil)
		}
		t.Logf("server at %s, embedded %v", srv.Addr, srv.Embedded)
		lctx, err := c.NewMutex("x").LockContext(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.NewMutex("x").UnlockContext(lctx); err != nil {
			t.Fatal(err)
		}
	})
	_, err := c.NewMutex("x").LockContext(context.Background())
	if !errors.Is(err, dsync.ErrClosed) {
		t.Fatalf("after the test, LockContext: %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c2, err := srv.Dial(ctx); err == nil {
		c2.Close()
		t.Fatal("the server still answers after the test")
	}
}

// TestNewClientWithoutRedis: with no redis-server on PATH, NewClient gives
// a Client on the in-process server.
func TestNewClientWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := exec.LookPath("redis-server"); err == nil {
		t.Fatal("redis-server still found")
	}
	TestWithdraw(t)
	srv := dsynctest.NewServer(t)
	if !srv.Embedded {
		t.Fatal("NewServer without redis-server on PATH is not the in-process server")
	}
}

// TestPrimitivesAcrossClients: on either server, two Clients (two
// processes of a service) exclude each other and wake each other.
func TestPrimitivesAcrossClients(t *testing.T) {
	for kind, start := range servers(t) {
		t.Run(kind, func(t *testing.T) {
			srv, err := start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			a, b := srv.NewClient(t), srv.NewClient(t)
			ctx := t.Context()

			t.Run("Mutex", func(t *testing.T) {
				n := 0
				var wg sync.WaitGroup
				for _, c := range []*dsync.Client{a, b} {
					for range 3 {
						wg.Go(func() {
							for range 5 {
								m := c.NewMutex("n")
								lctx, err := m.LockContext(ctx)
								if err != nil {
									t.Error(err)
									return
								}
								n++
								if err := m.UnlockContext(lctx); err != nil {
									t.Error(err)
								}
							}
						})
					}
				}
				wg.Wait()
				if n != 30 {
					t.Fatalf("n = %d, want 30", n)
				}
			})
			t.Run("FairMutex", func(t *testing.T) {
				held, err := a.NewFairMutex("f").LockContext(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() {
					lctx, err := b.NewFairMutex("f").LockContext(ctx)
					if err == nil {
						err = b.NewFairMutex("f").UnlockContext(lctx)
					}
					got <- err
				}()
				if err := a.NewFairMutex("f").UnlockContext(held); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			})
			t.Run("Semaphore", func(t *testing.T) {
				sa, sb := a.NewSemaphore("s", 2), b.NewSemaphore("s", 2)
				h, err := sa.Acquire(ctx, 2)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok, err := sb.TryAcquire(ctx, 1); ok || err != nil {
					t.Fatalf("TryAcquire with every permit held: %v, %v", ok, err)
				}
				if err := sa.Release(h, 2); err != nil {
					t.Fatal(err)
				}
				h, err = sb.Acquire(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				if err := sb.Release(h, 1); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("Once", func(t *testing.T) {
				runs := 0
				for _, c := range []*dsync.Client{a, b, a} {
					if err := c.NewOnce("o").Do(ctx, func(context.Context) error { runs++; return nil }); err != nil {
						t.Fatal(err)
					}
				}
				if runs != 1 {
					t.Fatalf("f ran %d times, want 1", runs)
				}
			})
			t.Run("Election", func(t *testing.T) {
				lctx, err := a.NewElection("e").Campaign(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				l, err := b.NewElection("e").Leader(ctx)
				if err != nil || l.Value != "a" {
					t.Fatalf("Leader: %+v, %v", l, err)
				}
				if err := a.NewElection("e").Resign(lctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestEmbeddedLeaseRunsOut: on the in-process server, a lock whose lease
// nobody renews (a fixed lease here; a crashed or paused holder's too)
// runs out, and a waiter of another Client takes it with a larger token,
// as on Redis. miniredis ages its keys only when told; before the server's
// clock, the waiter waited until its context ended.
func TestEmbeddedLeaseRunsOut(t *testing.T) {
	srv, err := dsynctest.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	a, b := srv.NewClient(t), srv.NewClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	actx, err := a.NewMutex("lease", dsync.WithLeaseTime(300*time.Millisecond)).LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bctx, err := b.NewMutex("lease").LockContext(ctx)
	if err != nil {
		t.Fatalf("the waiter did not get the lock after the holder's lease: %v", err)
	}
	ta, _ := dsync.FencingToken(actx)
	tb, _ := dsync.FencingToken(bctx)
	if tb <= ta {
		t.Fatalf("token %d after %d", tb, ta)
	}
	<-actx.Done() // the holder's lock context ends with its lease
	if cause := context.Cause(actx); !errors.Is(cause, dsync.ErrLockLost) {
		t.Fatalf("holder's cause %v, want ErrLockLost", cause)
	}
	if err := b.NewMutex("lease").UnlockContext(bctx); err != nil {
		t.Fatal(err)
	}
}
