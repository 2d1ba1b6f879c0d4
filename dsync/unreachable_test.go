package dsync_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisUnreachableSaysWhere (issue 38, item 7): with its Redis gone, a
// call fails with an error that names the lock, says that Redis at its
// address could not be reached and whether the call may be retried, and
// still matches the network error underneath (errors.Is / errors.As).
// WaitGroup.Add, not idempotent, says not to repeat it blindly.
func TestRedisUnreachableSaysWhere(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix(testPrefix(t)))
	ctx := ctxT(t)
	m := c.NewMutex("other")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(lctx))
	s.Stop()

	netErr := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	ran := 0
	for i := 0; i < 3; i++ { // the first may meet the broken connection, the next a refused dial
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = m.LockContext(cctx)
		cancel()
		require.Error(t, err)
		t.Log(err)
		require.True(t, netErr(err), "errors.Is/As still see the network error: %v", err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), `"other"`, "names the lock")
		assert.Contains(t, err.Error(), "Redis at "+s.Addr+" could not be reached", "says which Redis")
		assert.Contains(t, err.Error(), "may be retried")
		ran++
	}
	require.Equal(t, 3, ran)

	err = c.NewWaitGroup("wg-gone").Add(ctx, 1)
	require.Error(t, err)
	t.Log(err)
	require.True(t, netErr(err), "%v", err)
	assert.Contains(t, err.Error(), `"wg-gone"`)
	assert.Contains(t, err.Error(), "Redis at "+s.Addr)
}
