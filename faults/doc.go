// Package faults is dsync's fault-injection suite. It has no API: its tests
// run real redis-server processes on loopback, put an in-process toxiproxy
// in front of them, stop and kill lock holders that run as child processes,
// and check the recorded histories with porcupine against mutex,
// read-write and semaphore models (primitives_test.go also checks a
// FairMutex's grants against its queue as Redis shows it). kill_test.go
// SIGKILLs holders of each primitive, and FuzzOperations (fuzz_test.go)
// runs operation sequences against redis-server and a reference model;
// its seed corpus runs with the suite, and
//
//	go test -run '^$' -fuzz FuzzOperations -fuzztime 60s -fuzzminimizetime 5s
//
// explores further.
//
// It is a module of its own so that its test dependencies (porcupine,
// toxiproxy) never reach the go.mod of dsync's users. Run it with
//
//	cd faults && GOWORK=off go test -race -count=1 ./...
//
// and the long soak with -soak.
//
// Every scenario asserts the bounds. Three core faults this suite
// found are fixed: calls under a blackhole or a stalled server overran their
// deadline (a synchronous undo after a failed acquire), holds were lost at a
// 0.3x lease round trip (renewal sent SCRIPT LOAD before EVALSHA and rounds
// drifted), and a renewal racing a release reported a spurious loss.
package faults
