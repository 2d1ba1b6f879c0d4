package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// The grant instr mode (-instr-grant N): the instructions redis-server
// executes for a Mutex release that hands the lock to a wait of another
// Client (the one-hop grant), beside a release that grants nobody, counted
// by callgrind as in the instr mode. A private redis-server runs under
// callgrind; two default-options Clients, A and B (an hour's lease: no
// renewal round runs among the counted calls), take one name in turn. A
// round: A takes the lock; B waits for it, until its wait is queued for a
// grant in Redis and subscribed to the lock's channel; the counters are
// zeroed, A releases, B's wait returns with the lock, and the counters are
// dumped (the granting release); they are zeroed again, B releases with
// nobody waiting, and they are dumped (the plain release). Each window is
// checked to hold A's or B's one call and no other command of theirs.

const (
	instrGrantPrefix = "ig"
	instrGrantName   = "grant"
)

func runInstrGrant(rounds int, valgrind, redisBin string) error {
	srv, err := startCallgrind(valgrind, redisBin)
	if err != nil {
		return err
	}
	defer srv.stop()
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer admin.Close()
	var rtA, rtB atomic.Int64
	open := func(rt *atomic.Int64) (*dsyncLib, error) {
		return newDsync(srv.addr, rt, false, dsync.WithKeyPrefix(instrGrantPrefix), dsync.WithLease(time.Hour))
	}
	a, err := open(&rtA)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := open(&rtB)
	if err != nil {
		return err
	}
	defer b.close()
	ma, mb := a.c.NewMutex(instrGrantName), b.c.NewMutex(instrGrantName)
	key := instrGrantPrefix + ":{" + instrGrantName + "}:mutex"
	ctx := context.Background()

	// round runs one round; with count it returns the counts of its two
	// windows (granting, plain): in all, inside lua_pcall, inside
	// scriptCall.
	round := func(count bool) (grant, plain [3]float64, err error) {
		la, err := ma.LockContext(ctx)
		if err != nil {
			return
		}
		var lb context.Context
		got := make(chan error, 1)
		go func() {
			var err error
			lb, err = mb.LockContext(ctx)
			got <- err
		}()
		if err = waitGrantQueued(ctx, admin, key, got); err != nil {
			return
		}
		if count {
			if err = srv.zero(); err != nil {
				return
			}
		}
		a0, b0 := rtA.Load(), rtB.Load()
		if err = ma.UnlockContext(la); err != nil {
			return
		}
		if err = <-got; err != nil {
			return
		}
		if n, m := rtA.Load()-a0, rtB.Load()-b0; n != 1 || m != 0 {
			err = fmt.Errorf("the granting release's window held %d calls of A (want 1) and %d of B (want 0: a one-hop grant)", n, m)
			return
		}
		if count {
			if grant, err = srv.dump("grant-granting"); err != nil {
				return
			}
			if err = srv.zero(); err != nil {
				return
			}
		}
		a0, b0 = rtA.Load(), rtB.Load()
		if err = mb.UnlockContext(lb); err != nil {
			return
		}
		if n, m := rtA.Load()-a0, rtB.Load()-b0; n != 0 || m != 1 {
			err = fmt.Errorf("the plain release's window held %d calls of A (want 0) and %d of B (want 1)", n, m)
			return
		}
		if count {
			plain, err = srv.dump("grant-plain")
		}
		return
	}
	for range 20 { // warm-up: scripts loaded, connections and subscriptions up
		if _, _, err := round(false); err != nil {
			return err
		}
	}
	var grants, plains [3][]float64
	for range rounds {
		g, p, err := round(true)
		if err != nil {
			return err
		}
		for i := range 3 {
			grants[i] = append(grants[i], g[i])
			plains[i] = append(plains[i], p[i])
		}
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	fmt.Printf("| release | rounds | Redis instructions, median (min-max) | of which in Lua (lua_pcall) | commands scripts call (scriptCall) |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range []struct {
		name string
		v    [3][]float64
	}{{"granting (hands the lock to B's wait)", grants}, {"plain (nobody waits)", plains}} {
		fmt.Printf("| %s | %d | %.0f (%.0f-%.0f) | %.0f | %.0f |\n", r.name, rounds, med(r.v[0]), slices.Min(r.v[0]), slices.Max(r.v[0]), med(r.v[1]), med(r.v[2]))
	}
	fmt.Printf("\ngranting / plain (medians): %.2fx\n", med(grants[0])/med(plains[0]))
	return nil
}

// waitGrantQueued waits until one wait is queued for a grant of the Mutex
// key and subscribed to its channel, or the wait ends (got), or 10 s.
func waitGrantQueued(ctx context.Context, admin rueidis.Client, key string, got chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := admin.Do(ctx, admin.B().Llen().Key(key+":gq").Build()).AsInt64()
		if err != nil {
			return err
		}
		subs := int64(0)
		for _, cmd := range []string{"NUMSUB", "SHARDNUMSUB"} {
			r, err := admin.Do(ctx, admin.B().Arbitrary("PUBSUB", cmd, key+":ch").Build()).ToArray()
			if err != nil {
				return err
			}
			if len(r) == 2 {
				v, _ := r[1].AsInt64()
				subs += v
			}
		}
		if n == 1 && subs > 0 {
			return nil
		}
		select {
		case err := <-got:
			return fmt.Errorf("B's wait ended before it was queued for a grant: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("B's wait was not queued for a grant and subscribed within 10 s")
		}
		time.Sleep(2 * time.Millisecond) // polling Redis, outside the counted windows
	}
}
