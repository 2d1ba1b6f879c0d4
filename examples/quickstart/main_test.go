package main

import (
	"strings"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// The README's first command must work on a fresh machine: with no
// REDIS_ADDR it runs on the embedded server and loses no update.
func TestQuickstart(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	var out strings.Builder
	err := run(&out)
	require.NoError(t, err, "%v\n%s", err, out.String())
	require.Contains(t, out.String(), "= 100 (want 100)", "unexpected output")
}

// On a real Redis the example leaves no key behind.
func TestQuickstartLeavesNoKeys(t *testing.T) {
	s := redistest.Start(t)
	t.Setenv("REDIS_ADDR", s.Addr)
	var out strings.Builder
	err := run(&out)
	require.NoError(t, err, out.String())
	n, err := s.Do(t, "DBSIZE").AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "keys left behind")
}
