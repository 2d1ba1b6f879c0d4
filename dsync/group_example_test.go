package dsync_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dsync/dsync/dsync"
)

// A Group loads each key once among all the callers that want it at the
// same time, in every process; with WithResultTTL the result also serves
// the calls of the next minute.
func ExampleGroup() {
	c, stop := exampleClient()
	defer stop()

	type profile struct{ Name string }
	g := dsync.NewGroup[profile](c, "profiles", dsync.WithResultTTL(time.Minute))
	load := func(ctx context.Context) (profile, error) {
		fmt.Println("loading user:42")
		return profile{Name: "Ada"}, nil
	}
	ctx := context.Background()
	for range 3 {
		p, shared, err := g.Do(ctx, "user:42", load)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.Name, shared)
	}
	// Forget drops the kept result: the next call loads again.
	if err := g.Forget(ctx, "user:42"); err != nil {
		log.Fatal(err)
	}
	p, shared, _ := g.Do(ctx, "user:42", load)
	fmt.Println(p.Name, shared)
	// Output:
	// loading user:42
	// Ada false
	// Ada true
	// Ada true
	// loading user:42
	// Ada false
}
