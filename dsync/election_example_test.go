package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/dsync/dsync/dsync"
)

// One leader per name across processes: Campaign waits its turn and returns
// the leadership context (cancelled if the leadership is lost), Proclaim
// changes the leader's value, Resign hands over to the next candidate, and
// Observe sees every change, the end of a term included.
func ExampleElection() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	e := c.NewElection("scheduler")

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := e.Observe(octx)
	show := func() {
		if l := <-changes; l.Term != 0 {
			fmt.Println("observed leader:", l.Value)
		} else {
			fmt.Println("observed: no leader")
		}
	}
	show()

	lctx, err := e.Campaign(ctx, "node-1")
	if err != nil {
		log.Fatal(err)
	}
	show()
	if err := e.Proclaim(lctx, "node-1 (draining)"); err != nil {
		log.Fatal(err)
	}
	show()
	l, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	term, _ := dsync.FencingToken(lctx)
	fmt.Println("leader:", l.Value, "in its term:", l.Term == term)

	if err := e.Resign(lctx); err != nil {
		log.Fatal(err)
	}
	show()
	_, err = e.Leader(ctx)
	fmt.Println(errors.Is(err, dsync.ErrNoLeader), lctx.Err() != nil)
	// Output:
	// observed: no leader
	// observed leader: node-1
	// observed leader: node-1 (draining)
	// leader: node-1 (draining) in its term: true
	// observed: no leader
	// true true
}
