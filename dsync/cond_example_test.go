package dsync_test

import (
	"context"
	"fmt"
	"log"
)

// A Cond lets a consumer sleep until a producer, in any process, changes
// what the Mutex guards. Here the queue is a slice for brevity; across
// processes it would live in Redis or a database.
func ExampleCond() {
	c, stop := exampleClient()
	defer stop()

	m := c.NewMutex("jobs")
	cd := c.NewCond(m)
	var queue []string // guarded by m
	ctx := context.Background()

	done := make(chan struct{})
	go func() { // the consumer
		defer close(done)
		lctx, err := m.LockContext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for len(queue) == 0 {
			// Releases m, sleeps until signalled, holds m again.
			if lctx, err = cd.Wait(lctx); err != nil {
				log.Fatal(err)
			}
		}
		fmt.Println("got", queue[0])
		queue = queue[1:]
		if err := m.UnlockContext(lctx); err != nil {
			log.Fatal(err)
		}
	}()

	// The producer.
	lctx, err := m.LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	queue = append(queue, "job-1")
	if err := m.UnlockContext(lctx); err != nil {
		log.Fatal(err)
	}
	if err := cd.Signal(ctx); err != nil {
		log.Fatal(err)
	}
	<-done
	// Output:
	// got job-1
}
