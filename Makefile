# make test: what CI runs. It installs redis-server when it is missing.
.PHONY: test vet redis bench quickstart

redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }

# The library is the root module; otel/, goredis/ and examples/ are modules
# of their own in the workspace (go.work), faults/ and bench/ are outside it.
MODULES := ./... ./otel/... ./goredis/... ./examples/...

STATICCHECK := $(shell go env GOPATH)/bin/staticcheck

$(STATICCHECK):
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet: $(STATICCHECK)
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(MODULES)
	$(STATICCHECK) $(MODULES)
	cd faults && GOWORK=off go vet ./...

# The fault suite runs for minutes: internal/testprogress prints a line as
# each of its tests starts and ends, and what plain go test prints.
test: redis vet
	go test -race -count=1 -timeout 15m $(MODULES)
	# Allocation bounds hold without the race detector's own allocations.
	go test -count=1 -run 'Allocs' ./dsync/
	cd faults && GOWORK=off go test -json -race -count=1 -timeout 15m ./... | (cd .. && go run ./internal/testprogress)

# chaos: the rolling restart at 60 s per primitive (each of 4 replica processes
# restarting every 0.5 s; make test runs 10 s, each every 1 s), scenario 1
# of the fault suite at full size (4 processes x 16 goroutines x 60 s per
# primitive; stops within and past the lease, deploys), the network faults of the
# queued primitives, the SIGSTOP margin, the ACL check and the fuzz seed
# corpus; writes docs/reliability.md. CHAOSFLAGS adds flags
# (-chaos.longstop, -chaos.longshare, -chaos.prims).
.PHONY: chaos
chaos: redis
	go test -race -count=1 -timeout 30m -run '^TestRollingRestart$$' ./dsync/ -rolling.dur 60s -rolling.every 125ms -rolling.wgwall 100ms
	cd faults && GOWORK=off go test -race -count=1 -timeout 60m -v . \
		-run 'TestFaultChaos|TestFaultNetworkPrimitives|TestFaultServerRestartRenewalInterval|TestFaultStopMargin|TestFaultSecurityACLAllPrimitives|FuzzOperations' \
		-chaos.procs 4 -chaos.g 16 -chaos.dur 60s -reliability ../docs/reliability.md $(CHAOSFLAGS)

# soak: the 30-minute soak (every primitive, every fault class); adds its
# rows to docs/reliability.md.
.PHONY: soak
soak: redis
	cd faults && GOWORK=off go test -race -count=1 -timeout 50m -v -run 'TestFaultSoak$$' . -soak -reliability ../docs/reliability.md

quickstart:
	go run ./examples/quickstart

# make bench: dsync beside its peers on a private redis-server (~4 min;
# BENCHFLAGS=-quick for ~1 min, -spin to keep CPUs awake), then the
# performance blocks of README.md and bench/README.md written from its
# results (-docs). See bench/README.md.
bench: redis
	cd bench && GOWORK=off go run ./cmd/bench $(BENCHFLAGS) && GOWORK=off go run ./cmd/bench -docs

# make scale: what held locks, waiters and processes cost, on a private
# redis-server and a 3-master test cluster (minutes, not CI; writes
# bench/results/scale.{json,md}). SCALEFLAGS=-cap-cluster=false for one
# server only. See docs/capacity.md.
.PHONY: scale
scale: redis
	cd bench && GOWORK=off go run ./cmd/bench -capacity $(SCALEFLAGS)
