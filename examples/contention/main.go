// Command contention runs workers, in two Clients, that contend on a few
// locks with tracing on, and then reads the trace to answer the questions
// one would otherwise answer by hand in a trace viewer: which lock is
// contended, how long its waiters waited, and who made them wait. It
// follows the links dsyncotel records from each acquisition that waited
// to the hold spans of the holders it waited for ("blocked by"), which
// name the holder; a trace viewer shows the same links.
//
// Spans go to an in-memory exporter, which the report reads. When
// OTEL_EXPORTER_OTLP_ENDPOINT is set (the standard variable, e.g.
// http://localhost:4318), they are also sent there over OTLP/HTTP, to be
// seen in Jaeger, Tempo or any OTLP backend.
//
//	go run ./examples/contention            # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/contention
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/examples/internal/exredis"
	dsyncotel "github.com/dsync/dsync/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A lock the workers use: how often they pick it and how long they hold it.
type lockSpec struct {
	name   string
	weight int
	hold   time.Duration
}

var locks = []lockSpec{
	{"orders", 6, 4 * time.Millisecond},    // hot and held long: the bottleneck
	{"inventory", 3, 1 * time.Millisecond}, // busy but quick
	{"billing", 1, 2 * time.Millisecond},   // rarely used
}

const workerKey = attribute.Key("worker.id")

func main() {
	workers := flag.Int("workers", 8, "workers, spread over two Clients (two processes)")
	rounds := flag.Int("rounds", 25, "critical sections per worker")
	flag.Parse()
	if _, err := run(os.Stdout, *workers, *rounds); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, workers, rounds int) ([]lockReport, error) {
	mem := tracetest.NewInMemoryExporter()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSyncer(mem)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(context.Background()) // reads the OTEL_EXPORTER_OTLP_* variables
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		fmt.Fprintln(out, "exporting spans over OTLP to", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	defer tp.Shutdown(context.Background())

	srv, err := exredis.Start()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	fmt.Fprintln(out, "server:", srv.Describe())
	prefix := fmt.Sprintf("contention-example-%d-%d", os.Getpid(), time.Now().UnixNano())
	clients := make([]*dsync.Client, 2)
	for i := range clients {
		rc, err := srv.Client()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		if i == 0 {
			// After every Client is closed: leave nothing behind.
			defer exredis.Forget(context.Background(), rc, prefix+":*")
		}
		// Lock names are off by default in the telemetry (they can be
		// unbounded); these three are fixed, so record them.
		obs := dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp), dsyncotel.WithLockNames(true))
		// The Client's name is in the owners the hold spans carry.
		clients[i], err = dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs), dsync.WithClientName(fmt.Sprintf("client-%d", i)))
		if err != nil {
			return nil, err
		}
		defer clients[i].Close()
	}

	tracer := tp.Tracer("contention-example")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		c := clients[w%len(clients)]
		id := fmt.Sprintf("worker-%d", w)
		wg.Go(func() {
			for range rounds {
				l := pick()
				// The worker's own span: the lock's spans become its children,
				// which is how the report knows who held.
				ctx, span := tracer.Start(context.Background(), "work", trace.WithAttributes(workerKey.String(id)))
				m := c.NewMutex(l.name)
				lctx, err := m.LockContext(ctx)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(l.hold)
				err = m.UnlockContext(lctx)
				span.End()
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // think
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "%d workers x %d critical sections in %v\n\n", workers, rounds, time.Since(start).Round(time.Millisecond))
	if err := tp.ForceFlush(context.Background()); err != nil {
		return nil, err
	}
	reps := analyse(mem.GetSpans())
	printReport(out, reps)
	return reps, nil
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

// lockReport is what the trace says about one lock.
type lockReport struct {
	name    string
	acq     int           // acquisitions that got the lock
	waited  int           // of which waited behind a holder (a blocked-by link)
	total   time.Duration // their waiting, in all
	max     time.Duration
	blocker []blocker // who held the lock while they waited, most wait caused first
}

// A blocker is a worker whose holds others waited for, and the wait it
// caused.
type blocker struct {
	id     string // the worker, "worker-<n> (<its Client>)"
	caused time.Duration
}

// analyse reads the report from the spans, following the observer's
// blocked-by links: an acquire span that waited links to the hold span of
// each holder it found (in this process or another), and a hold span
// names its lock, its holder (dsync.lock.owner: the Client's name) and, by
// its parent, the worker that held it. Each wait is charged to its
// blockers, in equal parts. Locks with the most waiting come first.
func analyse(spans tracetest.SpanStubs) []lockReport {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	per := map[string]*lockReport{}
	caused := map[string]map[string]time.Duration{}
	for _, s := range spans {
		if s.Name != "dsync.mutex.acquire" || attr(s.Attributes, dsyncotel.KeyOutcome) != dsyncotel.OutcomeAcquired {
			continue
		}
		name := attr(s.Attributes, dsyncotel.KeyName)
		r := per[name]
		if r == nil {
			r = &lockReport{name: name}
			per[name], caused[name] = r, map[string]time.Duration{}
		}
		r.acq++
		var holds []tracetest.SpanStub
		for _, l := range s.Links {
			if h, ok := byID[l.SpanContext.SpanID()]; ok && attr(l.Attributes, dsyncotel.KeyLinkBlockedBy) == "true" {
				holds = append(holds, h)
			}
		}
		if len(holds) == 0 {
			continue // did not wait for a holder
		}
		d := s.EndTime.Sub(s.StartTime)
		r.waited, r.total, r.max = r.waited+1, r.total+d, max(r.max, d)
		for _, h := range holds {
			who := attr(byID[h.Parent.SpanID()].Attributes, workerKey) + " (" + client(attr(h.Attributes, dsyncotel.KeyOwner)) + ")"
			caused[name][who] += d / time.Duration(len(holds))
		}
	}
	var out []lockReport
	for name, r := range per {
		for id, d := range caused[name] {
			r.blocker = append(r.blocker, blocker{id, d})
		}
		slices.SortFunc(r.blocker, func(a, b blocker) int { return cmp.Or(cmp.Compare(b.caused, a.caused), cmp.Compare(a.id, b.id)) })
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b lockReport) int { return cmp.Or(cmp.Compare(b.total, a.total), cmp.Compare(a.name, b.name)) })
	return out
}

// client is the Client name in an owner, "<client name>/<random>".
func client(owner string) string {
	name, _, _ := strings.Cut(owner, "/")
	return name
}

func printReport(out io.Writer, reps []lockReport) {
	fmt.Fprintf(out, "%-10s %4s %7s %9s %10s  %s\n", "lock", "acq", "waited", "max wait", "total wait", "blocked by (wait caused)")
	for _, r := range reps {
		var top []string
		for _, b := range r.blocker[:min(3, len(r.blocker))] {
			top = append(top, fmt.Sprintf("%s %v", b.id, ms(b.caused)))
		}
		fmt.Fprintf(out, "%-10s %4d %7d %9v %10v  %s\n", r.name, r.acq, r.waited, ms(r.max), ms(r.total), strings.Join(top, ", "))
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
