package dsyncgoredis_test

import (
	"context"
	"log"

	dsyncgoredis "github.com/dsync/dsync/goredis"
	"github.com/redis/go-redis/v9"
)

// A service that has a go-redis client opens its dsync Client from it: the
// same server, password and database, no second configuration.
func ExampleDial() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", Password: "secret", DB: 2})
	defer rdb.Close()

	client, err := dsyncgoredis.Dial(ctx, rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // its own connections; rdb stays open

	m := client.NewMutex("orders")
	lctx, err := m.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer m.UnlockContext(lctx)
	// ... work under lctx, cancelled if the lock is lost
}
