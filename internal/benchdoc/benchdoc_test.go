package benchdoc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// README.md's and bench/README.md's performance blocks are what the bench
// would write from bench/results (go run ./cmd/bench -docs, from bench/):
// a figure edited by hand, or results committed without the documents
// written again, fail here. (It reads files only: no bench runs.)
func TestDocsFromResults(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := Parts(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		b, err := os.ReadFile(filepath.Join(root, p.Doc))
		if err != nil {
			t.Fatal(err)
		}
		what := "the block " + p.Block
		if p.Prefix != "" {
			what = "the line " + p.Prefix + "..."
		}
		got, err := p.Get(string(b))
		if err != nil {
			t.Errorf("%s: %v", p.Doc, err)
			continue
		}
		if got != p.Body {
			t.Errorf("%s: %s differs from what `cd bench && GOWORK=off go run ./cmd/bench -docs` writes from bench/results:\n%s", p.Doc, what, firstDiff(got, p.Body))
		}
	}
}

// Every figure of the blocks names its run: the provenance line gives
// the commit and the date, and a results file without a commit says so.
func TestProvenance(t *testing.T) {
	var r Run
	r.Machine.Date, r.Machine.Commit, r.Settings.Reps = "2026-11-27T14:24:10Z", "7082c3d", 3
	if p := r.Provenance(); !strings.Contains(p, "commit 7082c3d, 2026-11-27T14:24:10Z") {
		t.Errorf("provenance %q lacks the commit and the date", p)
	}
	r.Machine.Commit = ""
	if p := r.Provenance(); !strings.Contains(p, "commit unknown") {
		t.Errorf("provenance %q without a commit", p)
	}
}

func TestReplace(t *testing.T) {
	doc := "a\n" + Begin("x") + "\nold\n" + End("x") + "\nb\n"
	out, err := Replace(doc, "x", "new 1\nnew 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\n" + Begin("x") + "\nnew 1\nnew 2\n" + End("x") + "\nb\n"; out != want {
		t.Errorf("Replace = %q, want %q", out, want)
	}
	if body, _ := Block(out, "x"); body != "new 1\nnew 2\n" {
		t.Errorf("Block = %q", body)
	}
	empty := Begin("x") + "\n" + End("x") + "\n"
	if body, err := Block(empty, "x"); err != nil || body != "" {
		t.Errorf("Block of an empty block = %q, %v", body, err)
	}
	if _, err := Block("a\n", "x"); err == nil {
		t.Error("Block without markers: no error")
	}
	row := Part{Prefix: "| row", Body: "| row 2 |\n"}
	if out, err := row.Put("a\n| row 1 |\nb\n"); err != nil || out != "a\n| row 2 |\nb\n" {
		t.Errorf("Put of a line = %q, %v", out, err)
	}
	if _, err := row.Put("| row 1 |\n| row 3 |\n"); err == nil {
		t.Error("Put of a line that two lines start with: no error")
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + " of the block:\n  is:        " + gl + "\n  generated: " + wl
		}
	}
	return ""
}
