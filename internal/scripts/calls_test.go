package scripts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every script that dsync calls has its inputs built in one place, by a
// builder named after it (calls.go): <Script>Call or <Script>Calls, or, for
// calls that reuse their caller's buffers, Append<Script>Args (Keys, Hold,
// Head) and <Script>Keys. A script without one is listed in noCaller, and
// the test checks that no non-test file of package dsync names it.
func TestEveryScriptBuilt(t *testing.T) {
	// Scripts only the tests call (the renewal loop renews with the batch
	// forms, the *Many scripts).
	noCaller := map[string]bool{"MutexRenew": true, "RWRenew": true, "SemRenew": true, "OnceRenew": true, "ElectionTouch": true}

	fset := token.NewFileSet()
	parse := func(path string) *ast.File {
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		return f
	}
	// The scripts: table.go's variables made by script(...).
	var names []string
	for _, d := range parse("table.go").Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if c, ok := v.Values[i].(*ast.CallExpr); ok {
					if f, ok := c.Fun.(*ast.Ident); ok && f.Name == "script" {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	require.Greater(t, len(names), 40, "scripts found in table.go")
	// The builders: exported functions of calls*.go.
	builders := map[string]bool{}
	files, err := filepath.Glob("calls*.go")
	require.NoError(t, err)
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		for _, d := range parse(p).Decls {
			if f, ok := d.(*ast.FuncDecl); ok && f.Recv == nil && f.Name.IsExported() {
				builders[f.Name.Name] = true
			}
		}
	}
	require.NotEmpty(t, builders, "builders found in calls*.go")
	// The non-test sources of package dsync, for the scripts without one.
	var dsync strings.Builder
	srcs, err := filepath.Glob("../../dsync/*.go")
	require.NoError(t, err)
	for _, p := range srcs {
		if !strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			dsync.Write(b)
		}
	}
	require.NotZero(t, dsync.Len(), "dsync's sources")
	for _, n := range names {
		built := false
		for _, b := range []string{n + "Call", n + "Calls", n + "Keys", "Append" + n + "Args", "Append" + n + "Keys", "Append" + n + "Hold", "Append" + n + "Head"} {
			built = built || builders[b]
		}
		called := regexp.MustCompile(`scripts\.` + n + `\b`).MatchString(dsync.String())
		switch {
		case noCaller[n]:
			require.False(t, built, "%s has a builder: take it out of noCaller", n)
			require.False(t, called, "%s is listed as called by no dsync code, but dsync names it", n)
		default:
			require.True(t, built, "%s has no builder in calls*.go (<Script>Call, Append<Script>Args, ...)", n)
		}
	}
}
