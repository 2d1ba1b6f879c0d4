// Command contention runs a workload that contends on a few hot locks, in
// several processes with several goroutines each, with tracing on, and
// then reads the spans of every process to answer the question one would
// otherwise answer by hand in a trace viewer: who made the others wait,
// and for how long.
//
// Each acquisition that waited carries a dsync.lock.blocked_by link to the
// hold span of every holder that held the lock during its wait (in its
// own process or another), with dsync.lock.blocked_for, the seconds of the
// wait that holder accounts for. The report sums them per holder (client
// name, owner, lock) and prints the top blockers, and how much of the
// total wait behind holders (each wait's overlap with the other holds of
// its lock, in any process) the linked holds explain, from the spans
// alone. (Acquisitions slowed by round trips with no holder in the way
// are counted apart, as are those whose span overlapped a hold that had
// already let go of the lock in Redis: they sent one script, which found
// the lock free, and did not queue in their Client, so nothing held them
// up; their spans say so, with dsync.lock.attempts 1 and neither
// dsync.lock.queued nor dsync.lock.granted.)
//
// The processes are this program run again (CONTENTION_CHILD set): each
// has its own Client (named proc-<n>) and its own tracer, and sends its
// spans back on stdout. When OTEL_EXPORTER_OTLP_ENDPOINT is set (the
// standard variable, e.g. http://localhost:4318), each also exports its
// spans there over OTLP/HTTP, to be seen in Jaeger, Tempo or any OTLP
// backend, with the links between processes.
//
//	go run ./examples/contention            # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/contention
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/examples/internal/exredis"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A lock the workers use: how often they pick it and how long they hold it.
type lockSpec struct {
	name   string
	weight int
	hold   time.Duration
}

var locks = []lockSpec{
	{"orders", 6, 3 * time.Millisecond},    // hot and held long: the bottleneck
	{"inventory", 3, 1 * time.Millisecond}, // busy but quick
	{"billing", 1, 2 * time.Millisecond},   // rarely used
}

// childEnv makes this program a worker process: "<addr> <prefix> <n>
// <goroutines> <rounds>".
const childEnv = "CONTENTION_CHILD"

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := child(spec, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	procs := flag.Int("procs", 3, "worker processes")
	goroutines := flag.Int("goroutines", 4, "workers per process")
	rounds := flag.Int("rounds", 25, "critical sections per worker")
	flag.Parse()
	if _, err := run(os.Stdout, *procs, *goroutines, *rounds); err != nil {
		log.Fatal(err)
	}
}

// run starts a server (or uses REDIS_ADDR), runs procs worker processes,
// collects their spans and prints the report.
func run(out io.Writer, procs, goroutines, rounds int) (report, error) {
	srv, err := exredis.Start()
	if err != nil {
		return report{}, err
	}
	defer srv.Close()
	fmt.Fprintln(out, "server:", srv.Describe())
	prefix := fmt.Sprintf("contention-example-%d-%d", os.Getpid(), time.Now().UnixNano())
	rc, err := srv.Client()
	if err != nil {
		return report{}, err
	}
	defer rc.Close()
	defer exredis.Forget(context.Background(), rc, prefix+":*") // leave nothing behind

	self, err := os.Executable()
	if err != nil {
		return report{}, err
	}
	start := time.Now()
	var mu sync.Mutex
	var spans []span
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for n := range procs {
		cmd := exec.Command(self, "-test.run=^$") // (a test binary runs no test)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %d %d", childEnv, srv.Addr, prefix, n, goroutines, rounds))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return report{}, err
		}
		if err := cmd.Start(); err != nil {
			return report{}, err
		}
		wg.Go(func() {
			var got []span
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var s span
				if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
					errs <- fmt.Errorf("process %d: %w", n, err)
					return
				}
				got = append(got, s)
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("process %d: %w", n, err)
				return
			}
			mu.Lock()
			spans = append(spans, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return report{}, err
	}
	fmt.Fprintf(out, "%d processes x %d goroutines x %d critical sections in %v\n\n", procs, goroutines, rounds, time.Since(start).Round(time.Millisecond))
	rep := analyse(spans)
	rep.print(out)
	return rep, nil
}

// span is what a worker process sends back of one of its dsync spans.
type span struct {
	Hold     bool   `json:"hold,omitempty"` // a hold span; else an acquire span
	ID       string `json:"id"`
	Lock     string `json:"lock"`
	Owner    string `json:"owner"`
	Start    int64  `json:"start"` // Unix ns
	End      int64  `json:"end"`
	Acquired bool   `json:"acquired,omitempty"`
	Links    []link `json:"links,omitempty"`
	// Attempts and Queued are dsync.lock.attempts and dsync.lock.queued:
	// an acquisition that sent at most one script and did not queue in
	// its Client, and was not granted the lock by another process's
	// release (Granted), was held up by nobody, whatever its span
	// overlapped.
	Attempts int  `json:"attempts,omitempty"`
	Queued   bool `json:"queued,omitempty"`
	// Granted is dsync.lock.granted: another process's release granted
	// the lock to its one attempt's wait (it was held up).
	Granted bool `json:"granted,omitempty"`
}

// link is a blocked_by link of an acquire span.
type link struct {
	ID  string  `json:"id"`  // the holder's hold span
	For float64 `json:"for"` // dsync.lock.blocked_for, seconds
}

// child is one worker process: goroutines workers on its own Client, each
// rounds critical sections on a lock picked by weight; then its spans, one
// JSON object per line, on out.
func child(spec string, out io.Writer) error {
	var addr, prefix string
	var n, goroutines, rounds int
	if _, err := fmt.Sscanf(spec, "%s %s %d %d %d", &addr, &prefix, &n, &goroutines, &rounds); err != nil {
		return fmt.Errorf("%s=%q: %w", childEnv, spec, err)
	}
	mem := tracetest.NewInMemoryExporter()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSyncer(mem)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(context.Background()) // reads the OTEL_EXPORTER_OTLP_* variables
		if err != nil {
			return err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	defer tp.Shutdown(context.Background())
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	// Lock names are off by default in the telemetry (they can be
	// unbounded); these three are fixed, so record them. The Client's
	// name is in the owners the hold spans carry.
	obs := dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp), dsyncotel.WithLockNames(true))
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs), dsync.WithClientName(fmt.Sprintf("proc-%d", n)))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	// A service warms up before it serves (its connections, the scripts,
	// its subscription): each lock once; these spans are left out.
	for _, l := range locks {
		m := c.NewMutex(l.name)
		lctx, err := m.LockContext(context.Background())
		if err != nil {
			return err
		}
		if err := m.UnlockContext(lctx); err != nil {
			return err
		}
	}
	since := time.Now()
	for range goroutines {
		ctx := context.Background()
		wg.Go(func() {
			for range rounds {
				l := pick()
				m := c.NewMutex(l.name)
				lctx, err := m.LockContext(ctx)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(l.hold) // the critical section
				if err := m.UnlockContext(lctx); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // think
			}
		})
	}
	wg.Wait()
	c.Close()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for _, s := range mem.GetSpans() {
		if r, ok := record(s); ok && !s.StartTime.Before(since) {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// record is what the report needs of a dsync span (ok false: not one).
func record(s tracetest.SpanStub) (span, bool) {
	r := span{ID: s.SpanContext.SpanID().String(), Lock: attr(s.Attributes, dsyncotel.KeyName), Owner: attr(s.Attributes, dsyncotel.KeyOwner),
		Start: s.StartTime.UnixNano(), End: s.EndTime.UnixNano()}
	switch s.Name {
	case "dsync.mutex.hold":
		r.Hold = true
	case "dsync.mutex.acquire":
		r.Acquired = attr(s.Attributes, dsyncotel.KeyOutcome) == dsyncotel.OutcomeAcquired
		r.Attempts, _ = strconv.Atoi(attr(s.Attributes, dsyncotel.KeyAttempts))
		r.Queued = attr(s.Attributes, dsyncotel.KeyQueued) == "true"
		r.Granted = attr(s.Attributes, dsyncotel.KeyGranted) == "true"
		for _, l := range s.Links {
			if attr(l.Attributes, dsyncotel.KeyLinkBlockedBy) != "true" {
				continue
			}
			f, _ := strconv.ParseFloat(attr(l.Attributes, dsyncotel.KeyBlockedFor), 64)
			r.Links = append(r.Links, link{ID: l.SpanContext.SpanID().String(), For: f})
		}
	default:
		return r, false
	}
	return r, true
}

func pick() lockSpec {
	total := 0
	for _, l := range locks {
		total += l.weight
	}
	n := rand.IntN(total)
	for _, l := range locks {
		if n -= l.weight; n < 0 {
			return l
		}
	}
	return locks[0]
}

// report is what the spans of every process say about the waiting.
type report struct {
	acquired int // acquisitions that got the lock
	// waited counts those that waited behind a holder: other holds of
	// their lock (their hold spans, in any process) overlapped their wait;
	// linked those of them with at least one blocked_by link.
	waited, linked int
	// wait is how long they waited behind holders (the union of the other
	// holds' overlaps with each wait), explained how much of it the holds
	// they link to cover: both from the spans' own times.
	wait, explained time.Duration
	// slow counts the acquisitions that took over a millisecond without
	// any holder in the way (the round trips of a loaded machine), and
	// slowWait their time: not waiting behind anyone, so left out.
	slow     int
	slowWait time.Duration
	// alone counts the acquisitions whose span overlapped another
	// owner's hold span but that nothing held up: they sent one script,
	// which found the lock free, and did not queue in their Client (the
	// hold's release had run in Redis; its span ends when the reply is
	// back in its own process). aloneLinked counts those of them with a
	// blocked_by link: there is nothing to link, so it must be 0.
	alone, aloneLinked int
	blockers           []blocker // most wait caused first
}

// A blocker is one holder (a hold span's client, owner and lock: one
// critical section of a worker, whose owner dsync made for the call) and
// the wait it caused: the sum of the blocked_for of the links to its hold.
type blocker struct {
	client, owner, lock string
	caused              time.Duration
	holds               int // its holds that someone waited behind
}

// fraction is the share of the waiting the linked holds explain.
func (r report) fraction() float64 { return float64(r.explained) / float64(max(r.wait, 1)) }

// analyse reads the report from the spans of every process: each
// acquisition that waited behind holders, followed through its blocked_by
// links to the hold spans of its holders, wherever they ran.
func analyse(spans []span) report {
	holds := map[string]span{}
	byLock := map[string][]span{}
	for _, s := range spans {
		if s.Hold {
			holds[s.ID] = s
			byLock[s.Lock] = append(byLock[s.Lock], s)
		}
	}
	var r report
	type key struct{ owner, lock string }
	caused := map[key]*blocker{}
	seen := map[string]bool{}
	for _, s := range spans {
		if s.Hold || !s.Acquired {
			continue
		}
		r.acquired++
		var behind [][2]int64 // the other holds of its lock during its wait
		for _, h := range byLock[s.Lock] {
			if a, b := max(h.Start, s.Start), min(h.End, s.End); b > a && h.Owner != s.Owner {
				behind = append(behind, [2]int64{a, b})
			}
		}
		if len(behind) > 0 && s.Attempts <= 1 && !s.Queued && !s.Granted {
			r.alone++
			if len(s.Links) > 0 {
				r.aloneLinked++
			}
			behind = nil
		}
		if len(behind) == 0 {
			if d := time.Duration(s.End - s.Start); d > time.Millisecond {
				r.slow++
				r.slowWait += d
			}
			continue
		}
		r.waited++
		r.wait += union(behind)
		if len(s.Links) > 0 {
			r.linked++
		}
		var ivs [][2]int64
		for _, l := range s.Links {
			h, ok := holds[l.ID]
			if !ok {
				continue // outside the spans collected
			}
			if a, b := max(h.Start, s.Start), min(h.End, s.End); b > a {
				ivs = append(ivs, [2]int64{a, b})
			}
			k := key{h.Owner, h.Lock}
			bl := caused[k]
			if bl == nil {
				client, _, _ := strings.Cut(h.Owner, "/")
				bl = &blocker{client: client, owner: h.Owner, lock: h.Lock}
				caused[k] = bl
			}
			bl.caused += time.Duration(l.For * float64(time.Second))
			if !seen[l.ID] {
				seen[l.ID] = true
				bl.holds++
			}
		}
		r.explained += union(ivs)
	}
	for _, b := range caused {
		r.blockers = append(r.blockers, *b)
	}
	slices.SortFunc(r.blockers, func(a, b blocker) int {
		return cmp.Or(cmp.Compare(b.caused, a.caused), cmp.Compare(a.owner, b.owner), cmp.Compare(a.lock, b.lock))
	})
	return r
}

// union is the total length of the intervals (Unix ns).
func union(ivs [][2]int64) time.Duration {
	slices.SortFunc(ivs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var total, s, e int64
	for i, x := range ivs {
		if i == 0 || x[0] > e {
			total += e - s
			s, e = x[0], x[1]
			continue
		}
		e = max(e, x[1])
	}
	return time.Duration(total + e - s)
}

func (r report) print(out io.Writer) {
	fmt.Fprintf(out, "%d acquisitions, %d waited behind holders (%d of them linked to their blockers), %v of waiting behind them;\n",
		r.acquired, r.waited, r.linked, ms(r.wait))
	fmt.Fprintf(out, "the linked holds explain %v of it (%.1f%%); %d more took over 1 ms with no holder in the way (%v);\n",
		ms(r.explained), 100*r.fraction(), r.slow, ms(r.slowWait))
	fmt.Fprintf(out, "%d overlapped a hold that had let go in Redis: one script, which found the lock free, no queue (%d linked).\n\ntop blockers:\n",
		r.alone, r.aloneLinked)
	fmt.Fprintf(out, "%-8s %-42s %-10s %5s %12s\n", "client", "owner", "lock", "holds", "wait caused")
	for _, b := range r.blockers[:min(10, len(r.blockers))] {
		fmt.Fprintf(out, "%-8s %-42s %-10s %5d %12v\n", b.client, b.owner, b.lock, b.holds, ms(b.caused))
	}
}

func ms(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}
