package dsyncotel

// ScopeName is the instrumentation scope of the tracer and meter this
// package creates: its import path.
const ScopeName = "github.com/dsync/dsync/otel"

// Version is the version of this instrumentation, reported with ScopeName.
const Version = "0.1.0"
