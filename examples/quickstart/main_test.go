package main

import (
	"go/parser"
	"go/token"
	"strconv"
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
	require.Contains(t, out.String(), "embedded server")
}

// On a real Redis the example leaves no key for good: what the released
// lock keeps (the marker its next token continues from) expires.
func TestQuickstartRealRedis(t *testing.T) {
	s := redistest.Start(t)
	t.Setenv("REDIS_ADDR", s.Addr)
	var out strings.Builder
	err := run(&out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "= 100 (want 100)", "unexpected output")
	require.Contains(t, out.String(), "Redis at "+s.Addr)
	keys, err := s.Do(t, "KEYS", "*").AsStrSlice()
	require.NoError(t, err)
	for _, k := range keys {
		ttl, err := s.Do(t, "PTTL", k).AsInt64()
		require.NoError(t, err)
		require.Positive(t, ttl, "key %q is left for good", k)
	}
}

// The quickstart can be copied out of this repository: it imports no
// internal package, only dsync's public ones and the standard library.
func TestQuickstartPublicImports(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	require.NoError(t, err)
	require.NotEmpty(t, f.Imports)
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		require.NotContains(t, path, "internal", "main.go imports %s", path)
		if strings.Contains(path, ".") {
			require.Contains(t, []string{"github.com/dsync/dsync/dsync", "github.com/dsync/dsync/dsynctest"}, path, "main.go imports %s", path)
		}
	}
}
