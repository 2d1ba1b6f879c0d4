package dsyncotel_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/dsync/dsync/dsync"
	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/redis/rueidis"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Install the observer when creating the Client; every lock of the Client
// then records spans and metrics. Here the spans go to an in-memory
// exporter, and Redis is an in-process miniredis.
func ExampleNewObserver() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, AlwaysRESP2: true, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	c, err := dsync.NewClient(rc, dsync.WithObserver(dsyncotel.NewObserver(
		dsyncotel.WithTracerProvider(tp), // default: the global provider
		dsyncotel.WithLockNames(true),    // default: off, names can be unbounded
	)))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, job := tp.Tracer("example").Start(context.Background(), "job")
	m := c.NewMutex("orders")
	lctx, err := m.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = m.UnlockContext(lctx)
	job.End()

	for _, s := range spans.GetSpans() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		fmt.Println(strings.TrimSpace(fmt.Sprint(s.Name, " ", attrs["dsync.lock.name"], " ", attrs["dsync.lock.outcome"])))
	}
	// Output:
	// dsync.mutex.acquire orders acquired
	// dsync.mutex.hold orders
	// job
}
