package dsync_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A run whose f returned after its caller's deadline still records f's
// outcome, though Redis is slow to take it: the Once is done and f does
// not run again. (Recording under the caller's deadline plus the 40 ms
// cleanup grace lost the result of an f that had run: in make chaos a
// OnceValue Do whose f ran returned context.DeadlineExceeded.)
func TestOnceRecordsRunAfterDeadline(t *testing.T) {
	s := redistest.Start(t) // private: CLIENT PAUSE stalls every client of it
	c := newClientOn(t, s.Client(t))
	for _, value := range []bool{false, true} {
		name := "late-record"
		if value {
			name += "-value"
		}
		runs := 0
		f := func(fctx context.Context) (string, error) {
			runs++
			<-fctx.Done() // f runs past its caller's deadline
			// Redis takes no write for 300 ms: the end script waits.
			require.NoError(t, s.Do(t, "CLIENT", "PAUSE", "300", "WRITE").Error())
			return "v", nil
		}
		// A deadline long enough for Do to run f on a busy machine (at 50
		// ms, with both CPUs busy, Do's acquisition outlasted it and f
		// never ran); f waits it out, so its result is recorded after it
		// all the same.
		ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
		var err error
		if value {
			var v string
			v, err = dsync.OnceValue(c, name, f)(ctx)
			require.Equal(t, "v", v, "OnceValue's value")
		} else {
			err = c.NewOnce(name).Do(ctx, func(fctx context.Context) error { _, err := f(fctx); return err })
		}
		cancel()
		require.NoError(t, err, "value %v: Do whose f succeeded after the caller's deadline", value)
		// Done: a later call does not run f.
		if value {
			v, err := dsync.OnceValue(c, name, f)(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, "v", v)
		} else {
			require.NoError(t, c.NewOnce(name).Do(ctxT(t), func(fctx context.Context) error { _, err := f(fctx); return err }))
		}
		require.Equal(t, 1, runs, "value %v: runs of f", value)
	}
}

// A run whose lease lapsed unseen before its result reached Redis, another
// run having begun and succeeded since, is told so: f's context ends with
// ErrLockLost (and Observer.Lost is called) though Do returns nil with the
// other run's result. (It ended as released: in make soak a run whose
// recording took 1.2 s of a 1 s lease looked recorded, and two recorded
// runs of one Once were reported.)
func TestOnceSupersededRunLost(t *testing.T) {
	s := redistest.Start(t)
	var lost atomic.Int32
	a := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("p"), dsync.WithObserver(dsync.Observer{
		Lost: func(dsync.Lost) { lost.Add(1) },
	}))
	b := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("p"))
	for _, value := range []bool{false, true} {
		name := "superseded"
		kind := "once"
		if value {
			name, kind = name+"-value", "oncevalue"
		}
		lost.Store(0)
		var fctx context.Context
		f := func(ctx context.Context) (string, error) {
			fctx = ctx
			// Not before A's check of its holds when its control
			// subscription came up (controlLive): that check would find
			// the marker gone, and end the run as lost for that reason
			// first.
			waitFor(t, 10*time.Second, "a's control subscription", func() bool { return dsync.ForceSubscribed(a) })
			// The run's lease lapses (its marker goes, as if it expired
			// while the process or the network stalled) ...
			n, err := s.Do(t, "DEL", "p:{"+name+"}:"+kind+":run").AsInt64()
			require.NoError(t, err)
			require.Equal(t, int64(1), n, "the run's marker")
			// ... and a run of another Client begins and succeeds.
			if value {
				v, err := dsync.OnceValue(b, name, func(context.Context) (string, error) { return "b", nil })(ctxT(t))
				require.NoError(t, err)
				require.Equal(t, "b", v)
			} else {
				require.NoError(t, b.NewOnce(name).Do(ctxT(t), func(context.Context) error { return nil }))
			}
			return "a", nil
		}
		if value {
			v, err := dsync.OnceValue(a, name, f)(ctxT(t))
			require.NoError(t, err, "OnceValue whose run was superseded by one that succeeded")
			require.Equal(t, "b", v, "the value of the run that was recorded")
		} else {
			require.NoError(t, a.NewOnce(name).Do(ctxT(t), func(ctx context.Context) error { _, err := f(ctx); return err }),
				"Do whose run was superseded by one that succeeded")
		}
		require.ErrorIs(t, context.Cause(fctx), dsync.ErrLockLost, "value %v: f's context after its run was superseded", value)
		require.Contains(t, context.Cause(fctx).Error(), "another run began meanwhile and succeeded")
		require.Equal(t, int32(1), lost.Load(), "value %v: Observer.Lost calls", value)
	}
}
