package main

import (
	"os"
	"strings"
	"testing"
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
	if err := run(&b, 2, 50); err != nil {
		t.Fatal(err)
	}
	t.Log(b.String())
	if !strings.Contains(b.String(), "dsync.Mutex: 2 processes x 50 transfers, a+b = 1000") {
		t.Errorf("unexpected output:\n%s", b.String())
	}
}
