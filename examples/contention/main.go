// Command contention runs workers that contend on a few locks with tracing
// on, and then reads the trace to answer the questions one would otherwise
// answer by hand in a trace viewer: which lock is contended, how long its
// waiters wait (p50, p99, max, in total), and who waits most.
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
	"log"
	"math/rand/v2"
	"os"
	"slices"
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

	mem := tracetest.NewInMemoryExporter()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSyncer(mem)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(context.Background()) // reads the OTEL_EXPORTER_OTLP_* variables
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		fmt.Println("exporting spans over OTLP to", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	defer tp.Shutdown(context.Background())

	srv, err := exredis.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	fmt.Println("server:", srv.Describe())
	prefix := fmt.Sprintf("contention-example-%d", os.Getpid())
	clients := make([]*dsync.Client, 2)
	for i := range clients {
		rc, err := srv.Client()
		if err != nil {
			log.Fatal(err)
		}
		defer rc.Close()
		// Lock names are off by default in the telemetry (they can be
		// unbounded); these three are fixed, so record them.
		obs := dsyncotel.NewObserver(dsyncotel.WithTracerProvider(tp), dsyncotel.WithLockNames(true))
		clients[i], err = dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithObserver(obs))
		if err != nil {
			log.Fatal(err)
		}
		defer clients[i].Close()
	}

	tracer := tp.Tracer("contention-example")
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *workers {
		c := clients[w%len(clients)]
		id := fmt.Sprintf("worker-%d", w)
		wg.Go(func() {
			for range *rounds {
				l := pick()
				// The worker's own span: the lock's spans become its children,
				// which is how the report knows who waited.
				ctx, span := tracer.Start(context.Background(), "work", trace.WithAttributes(workerKey.String(id)))
				m := c.NewMutex(l.name)
				lctx, err := m.LockContext(ctx)
				if err != nil {
					log.Fatal(err)
				}
				time.Sleep(l.hold)
				if err := m.UnlockContext(lctx); err != nil {
					log.Fatal(err)
				}
				span.End()
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // think
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d workers x %d critical sections in %v\n\n", *workers, *rounds, time.Since(start).Round(time.Millisecond))
	if err := tp.ForceFlush(context.Background()); err != nil {
		log.Fatal(err)
	}
	report(mem.GetSpans())
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

// report is the analysis: per lock, from the acquire spans alone.
func report(spans tracetest.SpanStubs) {
	worker := map[trace.SpanID]string{}
	for _, s := range spans {
		if s.Name == "work" {
			worker[s.SpanContext.SpanID()] = attr(s.Attributes, workerKey)
		}
	}
	type stats struct {
		waits []time.Duration
		total time.Duration
		byWho map[string]time.Duration
	}
	per := map[string]*stats{}
	for _, s := range spans {
		if s.Name != "dsync.mutex.acquire" {
			continue
		}
		name := attr(s.Attributes, dsyncotel.KeyName)
		st := per[name]
		if st == nil {
			st = &stats{byWho: map[string]time.Duration{}}
			per[name] = st
		}
		if attr(s.Attributes, dsyncotel.KeyOutcome) != dsyncotel.OutcomeAcquired {
			continue // waits that did not end with the lock (none here)
		}
		d := s.EndTime.Sub(s.StartTime)
		st.waits = append(st.waits, d)
		st.total += d
		st.byWho[worker[s.Parent.SpanID()]] += d
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	// Most total waiting first: that is where to look.
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(per[b].total, per[a].total) })
	fmt.Printf("%-10s %6s %9s %9s %9s %10s  %s\n", "lock", "acq", "wait p50", "p99", "max", "total", "top waiters (total wait)")
	for _, n := range names {
		st := per[n]
		slices.Sort(st.waits)
		type who struct {
			id string
			d  time.Duration
		}
		var top []who
		for id, d := range st.byWho {
			top = append(top, who{id, d})
		}
		slices.SortFunc(top, func(a, b who) int { return cmp.Or(cmp.Compare(b.d, a.d), cmp.Compare(a.id, b.id)) })
		line := ""
		for i, w := range top[:min(3, len(top))] {
			if i > 0 {
				line += ", "
			}
			line += fmt.Sprintf("%s %v", w.id, ms(w.d))
		}
		fmt.Printf("%-10s %6d %9v %9v %9v %10v  %s\n", n, len(st.waits), ms(pct(st.waits, 50)), ms(pct(st.waits, 99)),
			ms(st.waits[len(st.waits)-1]), ms(st.total), line)
	}
}

// pct is the p-th percentile by nearest rank; waits is sorted.
func pct(waits []time.Duration, p int) time.Duration {
	i := (p*len(waits)+99)/100 - 1
	return waits[max(i, 0)]
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
