package dsyncotel_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
	dsyncotel "github.com/dsync/dsync/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Install the observer when creating the Client; every lock of the Client
// then records spans and metrics. Here the spans go to an in-memory
// exporter, and Redis is an in-process server (dsynctest).
func ExampleNewObserver() {
	srv, err := dsynctest.StartEmbedded()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	c, err := srv.Dial(context.Background(), dsync.WithObserver(dsyncotel.NewObserver(
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
