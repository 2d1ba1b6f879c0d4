package main

import (
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	const pass = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: noise of a passing test\n"}
{"Action":"run","Package":"p","Test":"TestA/sub"}
{"Action":"pass","Package":"p","Test":"TestA/sub","Elapsed":0.5}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.25}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t1.300s\n"}
{"Action":"pass","Package":"p","Elapsed":1.3}
`
	const fail = `{"Action":"run","Package":"q","Test":"TestB"}
{"Action":"run","Package":"q","Test":"TestB/row"}
{"Action":"output","Package":"q","Test":"TestB/row","Output":"    b_test.go:3: want 1, got 2\n"}
{"Action":"output","Package":"q","Test":"TestB/row","Output":"        \tError Trace:\tb_test.go:4\n"}
{"Action":"output","Package":"q","Test":"TestB/row","Output":"        \tError:      \tShould be zero\n"}
{"Action":"output","Package":"q","Test":"TestB/row","Output":"        \tMessages:   \tlate waits\n"}
{"Action":"fail","Package":"q","Test":"TestB/row","Elapsed":0}
{"Action":"fail","Package":"q","Test":"TestB","Elapsed":0.01}
{"Action":"output","Package":"q","Output":"FAIL\tq\t0.020s\n"}
{"Action":"fail","Package":"q","Elapsed":0.02}
`
	const buildFail = `{"ImportPath":"r","Action":"build-output","Output":"r/x.go:1:1: syntax error\n"}
{"ImportPath":"r","Action":"build-fail"}
{"Action":"output","Package":"r","Output":"FAIL\tr [build failed]\n"}
{"Action":"fail","Package":"r","Elapsed":0,"FailedBuild":"r"}
`
	for _, tc := range []struct {
		name, in string
		code     int
		want     []string
		not      []string
	}{
		{"pass", pass, 0, []string{"[0s] === RUN   TestA\n", "[0s] --- PASS: TestA (1.25s)\n", "PASS\nok  \tp\t1.300s\n"},
			[]string{"noise", "TestA/sub", "again"}},
		{"fail", pass + fail, 1, []string{"ok  \tp\t1.300s\n", "b_test.go:3: want 1, got 2", "--- FAIL: TestB (0.01s)", "FAIL\tq\t0.020s\n",
			"failed assertions, again:\n        \tError:      \tShould be zero\n        \tMessages:   \tlate waits\n"}, nil},
		{"build", buildFail, 1, []string{"syntax error", "FAIL\tr [build failed]"}, nil},
		{"nothing", "", 1, nil, nil},
		{"not json", "go: cannot find main module\n", 1, []string{"go: cannot find main module\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			t0 := time.Unix(0, 0)
			code := run(strings.NewReader(tc.in), &out, func() time.Time { return t0 })
			if code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, out.String())
				}
			}
		})
	}
}
