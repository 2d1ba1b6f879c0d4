package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	// The example re-executes itself; under test, itself is the test binary.
	if os.Getenv("SWAP_CHILD") != "" {
		child()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSwap runs both halves with two processes: the invariant must hold.
func TestSwap(t *testing.T) {
	var b strings.Builder
	require.NoError(t, run(&b, 2, 50))
	t.Log(b.String())
	assert.Contains(t, b.String(), "dsync.Mutex: 2 processes x 50 transfers, a+b = 1000", "unexpected output")
}
