module github.com/dsync/dsync/otel

go 1.25.0

replace github.com/dsync/dsync => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/dsync/dsync v0.0.0-20261125061713-6cc27bdaffaf
	github.com/redis/rueidis v1.0.79
	go.opentelemetry.io/otel v1.38.0
	go.opentelemetry.io/otel/metric v1.38.0
	go.opentelemetry.io/otel/sdk v1.38.0
	go.opentelemetry.io/otel/sdk/metric v1.38.0
	go.opentelemetry.io/otel/trace v1.38.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
