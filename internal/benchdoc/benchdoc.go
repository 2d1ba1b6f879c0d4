// Package benchdoc writes the performance figures of README.md and
// bench/README.md from the bench's results (bench/results/latest.json and
// latest.md, written by one run of make bench), between markers, so that
// the documents cannot quote a run other than the one the results file
// holds. The bench rewrites them (cd bench && GOWORK=off go run ./cmd/bench
// -docs, which make bench runs after a run); this package's test fails
// while they differ.
package benchdoc

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// Run is what the documents read of a results file (the bench's report).
type Run struct {
	Machine struct {
		Date   string `json:"date"`
		Commit string `json:"commit"`
		NProc  int    `json:"nproc"`
		CPU    string `json:"cpu"`
		Go     string `json:"go"`
		Redis  string `json:"redis"`
	} `json:"machine"`
	Settings struct {
		Quick bool `json:"quick"`
		Spin  bool `json:"spin"`
		Reps  int  `json:"reps"`
	} `json:"settings"`
	Results []struct {
		Scenario string             `json:"scenario"`
		Lib      string             `json:"lib"`
		Median   map[string]float64 `json:"median"`
	} `json:"results"`
}

// Load reads a results file.
func Load(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// peers are the other people's locks among the bench's libs, as the bench
// takes its best peer from them.
var peers = []string{"rueidislock", "redsync", "redsync-1ms", "redislock"}

// stallScenarios are the scenarios that count stalls (as the bench's).
var stallScenarios = []string{"serial", "parallel", "contended", "xproc", "handoff"}

func (r *Run) get(scenario, lib, metric string) (float64, bool) {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Lib == lib {
			v, ok := x.Median[metric]
			return v, ok
		}
	}
	return 0, false
}

// must is get for a figure the documents cannot do without: NaN shows as
// "?" where the results file lacks it.
func (r *Run) must(scenario, lib, metric string) float64 {
	if v, ok := r.get(scenario, lib, metric); ok {
		return v
	}
	return math.NaN()
}

// best returns the peer with the highest value of metric (the lowest with
// low), among those for which keep holds (nil: all).
func (r *Run) best(scenario, metric string, low bool, keep func(lib string) bool) (string, float64) {
	who, best := "", 0.0
	for _, p := range peers {
		v, ok := r.get(scenario, p, metric)
		if !ok || (keep != nil && !keep(p)) {
			continue
		}
		if who == "" || (low && v < best) || (!low && v > best) {
			who, best = p, v
		}
	}
	return who, best
}

// num formats v with thousands separators and prec decimals.
func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "?"
	}
	s := fmt.Sprintf("%.*f", prec, v)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if neg {
		out = "-" + out
	}
	if frac != "" {
		out += "." + frac
	}
	return out
}

// Provenance names the run: its commit, its date and the machine.
func (r *Run) Provenance() string {
	m := r.Machine
	commit := m.Commit
	if commit == "" {
		commit = "unknown"
	}
	mode := "full"
	if r.Settings.Quick {
		mode = "quick"
	}
	spin := "off"
	if r.Settings.Spin {
		spin = "on"
	}
	return fmt.Sprintf("a %s run (%d repeats, medians) of commit %s, %s, on %d CPUs (%s), Go %s, Redis %s, busy-loop keeper %s",
		mode, r.Settings.Reps, commit, m.Date, m.NProc, m.CPU, strings.TrimPrefix(m.Go, "go"), m.Redis, spin)
}

// A fig is a metric of the results and its decimals.
type fig struct {
	metric string
	prec   int
}

// row writes a table row of scenario sc: dsync's figure, the best peer's
// (the lowest with low) and raw's, each with its second figure, if any,
// written into the format with (e.g. " (%s)").
func (r *Run) row(b *strings.Builder, label, sc string, low bool, first, second fig, with string) {
	cell := func(lib string) string {
		s := num(r.must(sc, lib, first.metric), first.prec)
		if second.metric != "" {
			s += fmt.Sprintf(with, num(r.must(sc, lib, second.metric), second.prec))
		}
		return s
	}
	p, _ := r.best(sc, first.metric, low, nil)
	fmt.Fprintf(b, "| %s | %s | %s, %s | %s |\n", label, cell("dsync"), cell(p), p, cell("raw"))
}

// README is the body of README.md's performance block.
func README(r *Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "From `bench/results/latest.json`: %s.\n\n", r.Provenance())
	b.WriteString("| scenario | dsync | best peer | raw (SET NX + script) |\n| --- | ---: | ---: | ---: |\n")

	r.row(&b, "serial lock+unlock, ns/op (allocs/op)", "serial", true, fig{"ns_op", 0}, fig{"allocs_op", 0}, " (%s)")
	r.row(&b, "parallel, 64 goroutines, 10,000 keys, ops/s", "parallel", false, fig{"ops_s", 0}, fig{}, "")
	r.row(&b, "contended, 16 goroutines one key, acq/s (fairness)", "contended", false, fig{"acq_s", 0}, fig{"fairness", 3}, " (%s)")

	p, pv := r.best("contended", "wait_p99_ms", true, nil)
	cell := fmt.Sprintf("%s, %s (fairness %s)", num(pv, 2), p, num(r.must("contended", p, "fairness"), 2))
	fair := func(lib string) bool { return r.must("contended", lib, "fairness") >= 0.9 }
	if !fair(p) {
		if q, qv := r.best("contended", "wait_p99_ms", true, fair); q != "" {
			cell += fmt.Sprintf("; %s, %s (fairness %s)", num(qv, 2), q, num(r.must("contended", q, "fairness"), 2))
		}
	}
	fmt.Fprintf(&b, "| contended, wait p99 ms | %s | %s | %s |\n",
		num(r.must("contended", "dsync", "wait_p99_ms"), 2), cell, num(r.must("contended", "raw", "wait_p99_ms"), 2))

	r.row(&b, "cross-process, 2 x 8 goroutines, acq/s (fairness)", "xproc", false, fig{"acq_s", 0}, fig{"fairness", 3}, " (%s)")
	r.row(&b, "handoff to another process, p50 us", "handoff", true, fig{"handoff_p50_us", 0}, fig{}, "")
	r.row(&b, "Redis commands / round trips per contended acquisition", "contended", true, fig{"cmds_acq", 2}, fig{"rt_acq", 2}, " / %s")

	stalls := func(lib string) (float64, bool) {
		total, seen := 0.0, false
		for _, sc := range stallScenarios {
			if v, ok := r.get(sc, lib, "stalls"); ok {
				total, seen = total+v, true
			}
		}
		return total, seen
	}
	ds, _ := stalls("dsync")
	rs, _ := stalls("raw")
	var peerStalls []string
	worst := 0.0
	for _, q := range peers {
		if v, ok := stalls(q); ok {
			worst = max(worst, v)
			if v > 0 {
				peerStalls = append(peerStalls, fmt.Sprintf("%s: %s", q, num(v, 0)))
			}
		}
	}
	peerCell := num(worst, 0)
	if len(peerStalls) > 0 {
		peerCell = "0 (" + strings.Join(peerStalls, ", ") + ")"
	}
	fmt.Fprintf(&b, "| stalls (free lock, waiter waiting > 2 s) | %s | %s | %s |\n", num(ds, 0), peerCell, num(rs, 0))

	cpu := r.must("scale", "dsync", "cpu_pct")
	fmt.Fprintf(&b, "| %s held locks: renewal CPU at a 3 s lease, bytes per lock | %s%% of a core (renewals scale with 1/lease: ~%s%% at the default 30 s), %s B | | |\n",
		num(r.must("scale", "dsync", "locks"), 0), num(cpu, 2), num(cpu/10, 1), num(r.must("scale", "dsync", "bytes_lock"), 0))

	// The uncontended cycle and the FIFO primitives, from the same run.
	fmt.Fprintf(&b, "\nIn the same run the uncontended Mutex cycle (LockContext + UnlockContext) sent %s Redis commands, scripts' own included (raw: %s), and made %s allocations (raw: %s); ",
		num(r.must("serial", "dsync", "cmds_op"), 2), num(r.must("serial", "raw", "cmds_op"), 2),
		num(r.must("serial", "dsync", "allocs_op"), 1), num(r.must("serial", "raw", "allocs_op"), 1))
	po, pr := r.must("parallel", "dsync", "ops_s"), r.must("parallel", "raw", "ops_s")
	co, cr := r.must("parallel", "dsync", "redis_cpu_us_op"), r.must("parallel", "raw", "redis_cpu_us_op")
	fmt.Fprintf(&b, "with 64 goroutines on 10,000 keys it reached %sx raw's ops/s at %sx raw's Redis CPU per op. ",
		num(po/pr, 2), num(co/cr, 2))
	b.WriteString("With 16 goroutines of one process on one name, one acquisition cost, in Redis commands (scripts' own included) and acquire scripts:")
	var prims []string
	for _, x := range r.Results {
		if x.Scenario == "primitives" {
			prims = append(prims, fmt.Sprintf(" %s %s (%s)", x.Lib, num(x.Median["cmds_acq"], 1), num(x.Median["scripts_acq"], 2)))
		}
	}
	b.WriteString(strings.Join(prims, ","))
	b.WriteString(".\n")
	return b.String()
}

// Bench is the body of bench/README.md's latest-run block: latest.md, the
// markdown the same run wrote beside latest.json, its headings one level
// down, under a line naming the run.
func Bench(r *Run, latestMD string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Copied from `results/latest.md`: %s.\n\n", r.Provenance())
	for _, line := range strings.SplitAfter(strings.TrimRight(latestMD, "\n")+"\n", "\n") {
		if strings.HasPrefix(line, "#") {
			line = "#" + line
		}
		b.WriteString(line)
	}
	return b.String()
}

// Block markers: a generated block of a document lies between
// Begin(name) and End(name), each on a line of its own.
func Begin(name string) string {
	return "<!-- " + name + ": generated from bench/results by `cd bench && GOWORK=off go run ./cmd/bench -docs`; do not edit -->"
}

// End is the line that closes a generated block.
func End(name string) string { return "<!-- end " + name + " -->" }

// Block returns the body of doc's block name.
func Block(doc, name string) (string, error) {
	_, body, _, err := split(doc, name)
	return body, err
}

// Replace returns doc with the body of its block name replaced by body.
func Replace(doc, name, body string) (string, error) {
	before, _, after, err := split(doc, name)
	if err != nil {
		return "", err
	}
	return before + body + after, nil
}

func split(doc, name string) (before, body, after string, err error) {
	begin, end := Begin(name)+"\n", End(name)+"\n"
	i := strings.Index(doc, begin)
	if i < 0 || strings.Count(doc, begin) != 1 {
		return "", "", "", fmt.Errorf("benchdoc: want one line %q", Begin(name))
	}
	i += len(begin)
	j := strings.Index(doc[i:], end)
	if j < 0 || (j > 0 && doc[i+j-1] != '\n') {
		return "", "", "", fmt.Errorf("benchdoc: no line %q after %q", End(name), Begin(name))
	}
	return doc[:i], doc[i : i+j], doc[i+j:], nil
}

// Files of the repository the documents are written from, relative to its
// root.
const (
	ResultsJSON = "bench/results/latest.json"
	ResultsMD   = "bench/results/latest.md"
)

// CompareRowPrefix starts the line of README.md's comparison with the
// peers that gives their contended throughput: the line is written whole
// (CompareRow), as a block is.
const CompareRowPrefix = "| contended acquisitions/s, 16 goroutines (fairness"

// CompareRow is README.md's comparison row for the contended scenario:
// dsync, rueidislock, redsync (default options) and redislock, acq/s and
// fairness, naming the run.
func CompareRow(r *Run) string {
	cell := func(lib string) string {
		return fmt.Sprintf("%s (%s)", num(r.must("contended", lib, "acq_s"), 0), num(r.must("contended", lib, "fairness"), 3))
	}
	commit := r.Machine.Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s; bench run of commit %s, %s) | %s | %s | %s | %s | not measured | not measured |\n",
		CompareRowPrefix, commit, r.Machine.Date, cell("dsync"), cell("rueidislock"), cell("redsync"), cell("redislock"))
}

// A Part is one generated part of a document: the body of the block
// named Block, or, with Prefix, the one line that starts with it.
type Part struct {
	Doc, Block, Prefix string
	Body               string
}

// Get returns what doc holds in place of p.
func (p Part) Get(doc string) (string, error) {
	if p.Prefix == "" {
		return Block(doc, p.Block)
	}
	i, j, err := p.line(doc)
	if err != nil {
		return "", err
	}
	return doc[i:j], nil
}

// Put returns doc with p's body in its place.
func (p Part) Put(doc string) (string, error) {
	if p.Prefix == "" {
		return Replace(doc, p.Block, p.Body)
	}
	i, j, err := p.line(doc)
	if err != nil {
		return "", err
	}
	return doc[:i] + p.Body + doc[j:], nil
}

// line finds the one line of doc that starts with p.Prefix, its newline
// included.
func (p Part) line(doc string) (int, int, error) {
	at := -1
	for off := 0; off < len(doc); {
		end := strings.IndexByte(doc[off:], '\n')
		if end < 0 {
			end = len(doc) - off - 1
		}
		if strings.HasPrefix(doc[off:], p.Prefix) {
			if at >= 0 {
				return 0, 0, fmt.Errorf("benchdoc: more than one line starts with %q", p.Prefix)
			}
			at = off
		}
		off += end + 1
	}
	if at < 0 {
		return 0, 0, fmt.Errorf("benchdoc: no line starts with %q", p.Prefix)
	}
	end := strings.IndexByte(doc[at:], '\n')
	if end < 0 {
		return at, len(doc), nil
	}
	return at, at + end + 1, nil
}

// Parts returns the generated parts of README.md and bench/README.md, as
// the results under root make them.
func Parts(root string) ([]Part, error) {
	r, err := Load(root + "/" + ResultsJSON)
	if err != nil {
		return nil, err
	}
	md, err := os.ReadFile(root + "/" + ResultsMD)
	if err != nil {
		return nil, err
	}
	return []Part{
		{Doc: "README.md", Prefix: CompareRowPrefix, Body: CompareRow(r)},
		{Doc: "README.md", Block: "bench-readme", Body: README(r)},
		{Doc: "bench/README.md", Block: "bench-latest", Body: Bench(r, string(md))},
	}, nil
}

// Write rewrites the generated parts of the documents under root from the
// results there.
func Write(root string) error {
	parts, err := Parts(root)
	if err != nil {
		return err
	}
	for _, p := range parts {
		path := root + "/" + p.Doc
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := p.Put(string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", p.Doc, err)
		}
		if out != string(b) {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
