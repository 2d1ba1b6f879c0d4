// Package modgraph holds a test of what the library brings into a user's
// module graph.
package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A module that imports only the core package must not see the OpenTelemetry
// SDK, exporters, gRPC or protobuf in its module graph: those belong to the
// otel/ and examples/ modules. Before the split, requiring dsync raised a
// user's gRPC from v1.60.0 to v1.75.0. Nor go-redis (the goredis/ module)
// or SQLite (modernc.org, in examples/).
func TestUserModuleGraph(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/user\n\ngo 1.25.0\n\nrequire github.com/dsync/dsync v0.0.0\n\nreplace github.com/dsync/dsync => " + root + "\n"
	main := "package main\n\nimport _ \"github.com/dsync/dsync/dsync\"\n\nfunc main() {}\n"
	for name, text := range map[string]string{"go.mod": gomod, "main.go": main} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "no go command")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run("mod", "tidy")
	graph := run("list", "-m", "all")
	t.Logf("go list -m all:\n%s", graph)
	require.Contains(t, graph, "github.com/redis/rueidis ", "the graph read lacks the core's own requirement")
	for _, heavy := range []string{
		"go.opentelemetry.io/otel/sdk",
		"go.opentelemetry.io/otel/exporters",
		"google.golang.org/grpc",
		"google.golang.org/protobuf",
		"github.com/grpc-ecosystem",
		"github.com/redis/go-redis",
		"modernc.org/",
	} {
		for _, line := range strings.Split(graph, "\n") {
			assert.False(t, strings.HasPrefix(line, heavy), "a module importing only the core package has %q in its graph", line)
		}
	}
}
