package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// The renewal instr mode (-instr-renew N): the instructions redis-server
// executes per renewal of one hold, for each kind of hold, counted by
// callgrind as in the instr mode. For each kind a private redis-server runs
// under callgrind; one Client (lease instrRenewLease) takes N holds of that
// kind, on N names; after its first renewal round the counters are zeroed,
// then -instr-rounds rounds run and the counters are dumped. A round is one
// pipeline (DoMulti) of EVALSHA calls, counted by a wrapper around the
// Client's rueidis client: per renewal is the total over N x rounds. Nothing
// else runs meanwhile (the holders are parked), so everything counted is
// renewal. A per-term renewal of its own (an Election term's record, before
// the one renewer renewed it) is counted with the term's other renewals:
// it runs on its own ticker at the same period, so it adds about one call
// per term and round.

// instrRenewLease is the Client's lease in the renewal mode: rounds every
// 2 s leave a redis-server slowed ~50x by callgrind time for 1,000 holds.
const instrRenewLease = 6 * time.Second

var renewKinds = []string{"mutex", "fair", "rw-read", "rw-write", "sem", "once", "group", "election"}

// roundCounter wraps a rueidis.Client and counts the pipelines carrying
// EVALSHA: the renewer's rounds when nothing else runs.
type roundCounter struct {
	rueidis.Client
	rounds atomic.Int64
}

func (r *roundCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	// (A command's words are recycled once it is sent.)
	round := false
	for _, c := range multi {
		if cs := c.Commands(); len(cs) > 0 && cs[0] == "EVALSHA" {
			round = true
			break
		}
	}
	res := r.Client.DoMulti(ctx, multi...)
	if round {
		r.rounds.Add(1)
	}
	return res
}

func runInstrRenew(kinds []string, n, rounds int, valgrind, redisBin string) error {
	if len(kinds) == 0 {
		kinds = renewKinds
	}
	fmt.Printf("| kind | holds | rounds | Redis instructions per renewal | of which in Lua (lua_pcall) | commands scripts call (scriptCall) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, k := range kinds {
		r, err := instrRenewOne(k, n, rounds, valgrind, redisBin)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		fmt.Printf("| %s | %d | %d | %.0f | %.0f | %.0f |\n", k, n, rounds, r[0], r[1], r[2])
	}
	return nil
}

func instrRenewOne(kind string, n, rounds int, valgrind, redisBin string) ([3]float64, error) {
	var zero [3]float64
	srv, err := startCallgrind(valgrind, redisBin)
	if err != nil {
		return zero, err
	}
	defer srv.stop()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
	if err != nil {
		return zero, err
	}
	counter := &roundCounter{Client: rc}
	c, err := dsync.NewClient(counter, dsync.WithLease(instrRenewLease))
	if err != nil {
		rc.Close()
		return zero, err
	}
	// Close the dsync Client (which releases the holds) before the
	// parked holders return; then the rueidis client.
	park := make(chan struct{})
	var parked sync.WaitGroup
	defer rc.Close()
	defer parked.Wait()
	defer close(park)
	defer c.Close()
	if err := takeHolds(c, kind, n, park, &parked); err != nil {
		return zero, err
	}
	ctx := context.Background()
	waitRounds := func(k int64) error {
		target := counter.rounds.Load() + k
		deadline := time.Now().Add(time.Duration(k+2) * instrRenewLease)
		for counter.rounds.Load() < target {
			if time.Now().After(deadline) {
				return errors.New("renewal rounds did not come")
			}
			time.Sleep(5 * time.Millisecond) // polling the round count
		}
		return ctx.Err()
	}
	if err := waitRounds(1); err != nil {
		return zero, err
	}
	if err := srv.zero(); err != nil {
		return zero, err
	}
	if err := waitRounds(int64(rounds)); err != nil {
		return zero, err
	}
	r, err := srv.dump("renew-" + kind)
	if err != nil {
		return zero, err
	}
	for i := range r {
		r[i] /= float64(n * rounds)
	}
	return r, nil
}

// takeHolds makes c hold n holds of kind, on n names; holds that run a
// function (once, group, election's Campaign is not one) park on park.
func takeHolds(c *dsync.Client, kind string, n int, park chan struct{}, parked *sync.WaitGroup) error {
	ctx := context.Background()
	for i := range n {
		name := "renew" + strconv.Itoa(i)
		var err error
		switch kind {
		case "mutex":
			_, err = c.NewMutex(name).LockContext(ctx)
		case "fair":
			_, err = c.NewFairMutex(name).LockContext(ctx)
		case "rw-read":
			_, err = c.NewRWMutex(name).RLockContext(ctx)
		case "rw-write":
			_, err = c.NewRWMutex(name).LockContext(ctx)
		case "sem":
			_, err = c.NewSemaphore(name, 2).Acquire(ctx, 1)
		case "election":
			_, err = c.NewElection(name).Campaign(ctx, "v")
		case "once", "group":
			err = runParked(c, kind, name, park, parked)
		default:
			return fmt.Errorf("unknown kind %q (known: %v)", kind, renewKinds)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runParked starts a Once or Group run on name whose function blocks until
// park closes, and returns once the run holds its lock.
func runParked(c *dsync.Client, kind, name string, park chan struct{}, parked *sync.WaitGroup) error {
	started := make(chan struct{})
	errc := make(chan error, 1)
	f := func(context.Context) error {
		close(started)
		<-park
		return nil
	}
	parked.Add(1)
	go func() {
		defer parked.Done()
		var err error
		if kind == "once" {
			err = c.NewOnce(name).Do(context.Background(), f)
		} else {
			_, _, err = dsync.NewGroup[int](c, name).Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 0, f(ctx) })
		}
		errc <- err
	}()
	select {
	case <-started:
		return nil
	case err := <-errc:
		return fmt.Errorf("run ended before it started: %v", err)
	}
}
