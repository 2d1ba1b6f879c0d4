package dsync_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What one acquisition costs under contention: 16 goroutines of one Client
// on one name, on a private server, counted by the server (INFO
// commandstats, commands inside scripts included) and by the observer
// (acquire scripts sent). A FIFO lock is granted by the release: a waiter
// sends one acquire script (the one that queues it) and is told of its
// grant on its Client's channel, subscribed once.
func TestFIFOCostsUnderContention(t *testing.T) {
	for _, tc := range []struct {
		name        string
		scripts     float64 // acquire scripts per acquisition, at most
		commands    float64 // Redis commands per acquisition, at most
		acquireLoop func(c *dsync.Client) func(ctx context.Context) error
	}{
		{"FairMutex", 1.2, 17, func(c *dsync.Client) func(ctx context.Context) error {
			f := c.NewFairMutex("cost")
			return func(ctx context.Context) error {
				l, err := f.LockContext(ctx)
				if err != nil {
					return err
				}
				return f.UnlockContext(l)
			}
		}},
		{"RWMutex writers", 1.2, 16, func(c *dsync.Client) func(ctx context.Context) error {
			rw := c.NewRWMutex("cost")
			return func(ctx context.Context) error {
				l, err := rw.LockContext(ctx)
				if err != nil {
					return err
				}
				return rw.UnlockContext(l)
			}
		}},
		{"RWMutex 90% readers", 1.2, 22.5, func(c *dsync.Client) func(ctx context.Context) error {
			rw := c.NewRWMutex("cost")
			var n atomic.Int64
			return func(ctx context.Context) error {
				if n.Add(1)%10 == 0 {
					l, err := rw.LockContext(ctx)
					if err != nil {
						return err
					}
					return rw.UnlockContext(l)
				}
				l, err := rw.RLockContext(ctx)
				if err != nil {
					return err
				}
				return rw.RUnlockContext(l)
			}
		}},
		{"Semaphore size 1", 1.2, 18, semCycle(1)},
		{"Semaphore size 4", 1.2, 18, semCycle(4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			var attempts, acquisitions atomic.Int64
			obs := dsync.Observer{AcquireDone: func(_ context.Context, e dsync.AcquireDone) {
				attempts.Add(int64(e.Attempts))
				acquisitions.Add(1)
			}}
			c := newClientOn(t, s.Client(t), dsync.WithObserver(obs))
			ctx := ctxT(t)
			cycle := tc.acquireLoop(c)
			require.NoError(t, cycle(ctx)) // scripts loaded
			rc := s.Client(t)
			resetStats(t, ctx, rc, c)
			attempts.Store(0)
			acquisitions.Store(0)
			const goroutines, each = 16, 100
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						if err := cycle(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			total, info := commandCalls(t, ctx, rc)
			n := float64(acquisitions.Load())
			require.Equal(t, float64(goroutines*each), n, "acquisitions observed")
			perScripts, perCmds := float64(attempts.Load())/n, float64(total)/n
			// Redis does not count SUBSCRIBE in commandstats; the channels
			// subscribed now (they linger a while after the last wait) show
			// whether each wait subscribed a channel of its own.
			// The locks' channels ("<prefix>:{<name>}:..."), not the Clients'
			// control channel ("<prefix>:force", see ForceUnlock),
			// subscribed once for each Client's life.
			chans, err := rc.Do(ctx, rc.B().PubsubChannels().Pattern("*:{*").Build()).AsStrSlice()
			require.NoError(t, err)
			t.Logf("%s: %.2f acquire scripts, %.2f Redis commands per acquisition (%v acquisitions), channels %q\n%s", tc.name, perScripts, perCmds, n, chans, info)
			assert.LessOrEqual(t, perScripts, tc.scripts, "acquire scripts per acquisition")
			assert.LessOrEqual(t, perCmds, tc.commands, "Redis commands per acquisition")
			assert.LessOrEqual(t, len(chans), 1, "channels subscribed: one per Client and lock")
		})
	}
}

func semCycle(size int64) func(c *dsync.Client) func(ctx context.Context) error {
	return func(c *dsync.Client) func(ctx context.Context) error {
		sem := c.NewSemaphore("cost", size)
		return func(ctx context.Context) error {
			l, err := sem.Acquire(ctx, 1)
			if err != nil {
				return err
			}
			return sem.Release(l, 1)
		}
	}
}
