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
// and the long soak with -soak (make soak).
//
// Scenario 1 (chaos_test.go) runs every primitive — Mutex, FairMutex,
// RWMutex, Semaphore, Once, OnceValue, WaitGroup, MultiLock, Election,
// Group, Cond — in N child processes of G goroutines for D (-chaos.procs,
// -chaos.g, -chaos.dur; 4 x 8 x 10 s by default, 4 x 16 x 60 s under make
// chaos) while holders are SIGKILLed or SIGSTOPped, processes deploy
// (close their Client and open another: chaos_deploy_test.go) and waits
// are cancelled; critical sections write a fenced counter and an unfenced
// register, and the histories are checked against the primitive's model
// (a Cond's signals by checkCond, chaos_cond_test.go). network_prims_test.go puts the queued
// primitives (FairMutex, RWMutex, Semaphore) under every network fault,
// acl_test.go runs every primitive as a user restricted to the prefix,
// restart_test.go checks holders of every kind are cancelled within one
// renewal interval of a restart, and the soak runs every primitive under
// every fault class. With -reliability FILE the suite writes the figures of
// its run as a table (report_test.go): make chaos writes
// docs/reliability.md. -dsyncbugs asserted the bounds dsync missed; none
// is behind it now (margin_test.go lists what was).
//
// Every scenario asserts the bounds. Three core faults this suite
// found are fixed: calls under a blackhole or a stalled server overran their
// deadline (a synchronous undo after a failed acquire), holds were lost at a
// 0.3x lease round trip (renewal sent SCRIPT LOAD before EVALSHA and rounds
// drifted), and a renewal racing a release reported a spurious loss.
package faults
