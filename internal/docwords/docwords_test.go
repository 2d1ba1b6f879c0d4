// Package docwords holds a test that keeps the library's godoc short: the
// package doc a reader meets first, and everything `go doc -all` prints.
package docwords

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 41's limits. The mechanism (how waits, handoffs, tokens, renewal and
// Close work) belongs in docs/design.md, not in the godoc.
const (
	maxPackageDocWords = 800
	maxAllWords        = 8000
)

// TestDocWords counts words as wc -w does (runs of non-space). The package
// doc is read with go/doc from dsync/doc.go: its words are those `go doc
// ./dsync` prints before the first declaration (the text is only rewrapped).
// The whole is `go doc -all ./dsync` itself: package line, package doc,
// every exported declaration (struct fields and their comments included,
// "//" counting as a word as in wc -w) and its doc.
func TestDocWords(t *testing.T) {
	dir := filepath.Join("..", "..", "dsync")
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, "no Go files in %s", dir)
	p, err := doc.NewFromFiles(fset, files, "github.com/dsync/dsync/dsync")
	require.NoError(t, err)
	pkgWords := len(strings.Fields(p.Doc))
	require.NotZero(t, pkgWords, "dsync has no package doc")
	t.Logf("package doc: %d words (limit %d)", pkgWords, maxPackageDocWords)
	assert.LessOrEqual(t, pkgWords, maxPackageDocWords,
		"dsync's package doc is too long: move mechanism to docs/design.md")

	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "no go command")
	cmd := exec.Command(gobin, "doc", "-all", "./dsync")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go doc -all ./dsync\n%s", out)
	all := len(strings.Fields(string(out)))
	// Both must see the same package: the package doc is part of the whole.
	require.Contains(t, strings.Join(strings.Fields(string(out)), " "), firstWords(p.Doc, 12))
	t.Logf("go doc -all: %d words (limit %d)", all, maxAllWords)
	assert.LessOrEqual(t, all, maxAllWords,
		"go doc -all ./dsync is too long: type and method docs keep the contract; mechanism goes to docs/design.md")
}

func firstWords(s string, n int) string {
	w := strings.Fields(s)
	return strings.Join(w[:min(n, len(w))], " ")
}
