package main

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScoped runs the example (on the embedded server unless REDIS_ADDR is
// set) and checks its point: after the forced release, worker-1's late
// write is rejected and the store ends with worker-2's data.
func TestScoped(t *testing.T) {
	var b strings.Builder
	store, err := run(io.MultiWriter(&b, testWriter{t}))
	require.NoError(t, err)
	out := b.String()
	assert.Contains(t, out, "worker-1: stops before step", "worker-1 did not stop on the lost lock")
	assert.Contains(t, out, `dsync: mutex "report": lock lost`, "worker-1 did not stop on the lost lock")
	rejected := 0
	for _, l := range store.log {
		if strings.HasPrefix(l, "REJECTED worker-1") {
			rejected++
		}
		assert.False(t, strings.HasPrefix(l, "REJECTED worker-2"), "wrong write rejected: %s", l)
		if rejected > 0 {
			assert.False(t, strings.HasPrefix(l, "accepted worker-1"), "wrong write accepted: %s", l)
		}
	}
	assert.NotEqual(t, 0, rejected, "no stale write was rejected")
	if assert.Equal(t, "step 2", store.value, "final value") {
		assert.Contains(t, store.log[len(store.log)-1], "worker", "final value %q", store.value)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
