package dsync_test

import (
	"context"
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
