package dsync

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPausePastLeaseLogsLeaseRanOut (issue 38, item 9): a process that
// resumes from a pause past its lease (the lease clock 2 s behind, as
// after a SIGSTOP) finds its lock lost with a cause that says the lease ran
// out locally while it was paused, and logs that (kind spelled "mutex"),
// not a failed renewal.
func TestPausePastLeaseLogsLeaseRanOut(t *testing.T) {
	rc := redistest.Start(t).Client(t)
	var logs syncBuf
	c, err := NewClient(rc, WithKeyPrefix("pause"), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	m := c.NewMutex("paused")
	lctx, err := m.LockContext(context.Background())
	require.NoError(t, err)
	h := lctx.(*lockCtx).h
	h.mu.Lock()
	h.deadline = time.Now().Add(-2 * time.Second)
	h.mu.Unlock()
	require.Error(t, lctx.Err(), "the holder checks its lock context on resuming")
	cause := context.Cause(lctx)
	require.ErrorIs(t, cause, ErrLockLost)
	assert.Contains(t, cause.Error(), `"paused"`)
	assert.Contains(t, cause.Error(), "lease ran out locally while the process was paused")
	out := logs.String()
	var lost []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `msg="dsync: lock lost"`) {
			lost = append(lost, l)
		}
	}
	require.Len(t, lost, 1, "%s", out)
	assert.Contains(t, lost[0], "kind=mutex")
	assert.Contains(t, lost[0], "lease ran out locally while the process was paused")
	assert.NotContains(t, out, "renewal failed")
	require.NoError(t, m.UnlockContext(lctx)) // Redis still has it: the release takes it back
}
