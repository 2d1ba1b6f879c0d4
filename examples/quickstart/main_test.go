package main

import (
	"strings"
	"testing"
)

// The README's first command must work on a fresh machine: with no
// REDIS_ADDR it runs on the embedded server and loses no update.
func TestQuickstart(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "= 100 (want 100)") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}
