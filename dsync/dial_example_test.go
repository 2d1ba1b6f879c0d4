package dsync_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
	"github.com/redis/rueidis"
)

// Dial takes what a service's configuration already holds: host:port, a
// redis:// or rediss:// URL, a cluster's seeds or a redis-sentinel:// URL.
// Make one Client per process; its Close releases what it holds and closes
// the connection.
func ExampleDial() {
	// A redis-server for the example (an in-process one if none is
	// installed); yours runs elsewhere.
	srv, err := dsynctest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	client, err := dsync.Dial(ctx, "redis://"+srv.Addr+"/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	m := client.NewMutex("orders")
	lctx, err := m.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	token, _ := dsync.FencingToken(lctx)
	fmt.Println("held with a fencing token:", token > 0)
	fmt.Println(m.UnlockContext(lctx))
	// Output:
	// held with a fencing token: true
	// <nil>
}

// An address Dial cannot use is an ErrInvalidArgument that says what is
// wrong, without the password.
func ExampleDial_invalid() {
	_, err := dsync.Dial(context.Background(), "redis://app:s3cret@cache.internal:port/0")
	fmt.Println(errors.Is(err, dsync.ErrInvalidArgument))
	fmt.Println(strings.Contains(err.Error(), "s3cret"))
	// Output:
	// true
	// false
}

// NewClient shares a rueidis client the program already has. Closing the
// dsync Client leaves it open.
func ExampleNewClient() {
	srv, err := dsynctest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	rc, err := rueidis.NewClient(srv.ClientOption()) // the program's own client
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()

	client, err := dsync.NewClient(rc)
	if err != nil {
		log.Fatal(err)
	}
	once := client.NewOnce("migrate-v2")
	err = once.Do(ctx, func(context.Context) error {
		fmt.Println("migrating")
		return nil
	})
	fmt.Println(err)
	client.Close()

	fmt.Println(rc.Do(ctx, rc.B().Ping().Build()).ToString())
	// Output:
	// migrating
	// <nil>
	// PONG <nil>
}
