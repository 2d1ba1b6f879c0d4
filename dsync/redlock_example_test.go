package dsync_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
)

// A RedLock is held on a majority of independent Redis servers, so losing
// one of three does not lose the lock. It has no fencing token.
func ExampleRedLock() {
	ctx := context.Background()
	var clients []*dsync.Client // one per independent server
	for range 3 {
		srv, err := dsynctest.StartEmbedded()
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		c, err := srv.Dial(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}

	report := dsync.NewRedLock("nightly-report", clients)
	lctx, err := report.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, ok, err := dsync.NewRedLock("nightly-report", clients).TryLockContext(ctx) // another caller
	fmt.Println("another caller got it:", ok, err)
	_, hasToken := dsync.FencingToken(lctx)
	fmt.Println("fencing token:", hasToken)
	fmt.Println(report.UnlockContext(lctx))
	// Output:
	// another caller got it: false <nil>
	// fencing token: false
	// <nil>
}
