// Command testprogress reads `go test -json` on stdin and prints what a
// plain `go test` prints (the output of failed tests, each package's
// closing "ok"/"FAIL" lines, build errors), plus a line as each top-level
// test starts and ends, with the time since the start, so a long run shows
// where it is. At the end it repeats the failed assertions (testify's
// Test, Error and Messages lines, and panics), so that the tail of a long
// log says what failed. It exits 1 if a package failed or none reported.
//
//	go test -json ./... | go run ./internal/testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// event is what test2json writes (go doc test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout, time.Now))
}

func run(in io.Reader, out io.Writer, now func() time.Time) int {
	start := now()
	stamp := func() string { return fmt.Sprintf("[%s]", now().Sub(start).Round(time.Second)) }
	logs := make(map[string][]string) // output of running top-level tests, by package and test
	failed, passed := false, 0
	var again []string // failed assertions, repeated at the end
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text()) // not from test2json: pass it on
			continue
		}
		top, _, sub := strings.Cut(e.Test, "/")
		key := e.Package + " " + top
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Test == "": // the package's own lines: ok, FAIL, PASS, panics
			switch e.Action {
			case "output":
				fmt.Fprint(out, e.Output)
			case "fail":
				failed = true
			case "pass", "skip":
				passed++
			}
		case e.Action == "output":
			logs[key] = append(logs[key], e.Output)
		case sub:
		case e.Action == "run":
			fmt.Fprintf(out, "%s === RUN   %s\n", stamp(), e.Test)
		case e.Action == "pass" || e.Action == "skip" || e.Action == "fail":
			if e.Action == "fail" {
				for _, l := range logs[key] {
					fmt.Fprint(out, l)
					again = appendAssertion(again, l)
				}
			}
			fmt.Fprintf(out, "%s --- %s: %s (%.2fs)\n", stamp(), strings.ToUpper(e.Action), e.Test, e.Elapsed)
			delete(logs, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testprogress:", err)
		return 1
	}
	for _, lines := range logs { // tests that never ended (a crash): show them
		for _, l := range lines {
			fmt.Fprint(out, l)
			again = appendAssertion(again, l)
		}
	}
	if len(again) > 0 {
		fmt.Fprintln(out, "failed assertions, again:")
		for _, l := range again {
			fmt.Fprint(out, l)
		}
	}
	if failed || passed == 0 {
		return 1
	}
	return 0
}

// maxAgain bounds the assertions repeated at the end, and maxLine each
// line of them.
const (
	maxAgain = 60
	maxLine  = 600
)

// appendAssertion appends l to again if it is a line of a failed
// assertion: testify's Test, Error or Messages line, or a panic.
func appendAssertion(again []string, l string) []string {
	t := strings.TrimSpace(l)
	if len(again) >= maxAgain || !(strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "Test:") ||
		strings.HasPrefix(t, "Messages:") || strings.HasPrefix(t, "panic:")) {
		return again
	}
	if len(l) > maxLine {
		l = l[:maxLine] + "…\n"
	}
	return append(again, l)
}
