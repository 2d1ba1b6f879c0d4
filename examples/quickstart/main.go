// Quickstart: several workers, each with its own dsync.Client (as if in
// separate processes), increment one shared counter in Redis under a
// dsync.Mutex. The read-modify-write is deliberately unguarded by Redis
// itself, so without the lock updates would be lost.
//
//	go run ./examples/quickstart          # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/examples/internal/exredis"
)

const (
	workers    = 4
	increments = 25
	counterKey = "quickstart:counter"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	srv, err := exredis.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(out, "using", srv.Describe())

	ctx := context.Background()
	admin, err := srv.Client()
	if err != nil {
		return err
	}
	defer admin.Close()
	admin.Do(ctx, admin.B().Del().Key(counterKey).Build())
	// Leave nothing behind on a real Redis: the counter, and the lock's
	// key (a released lock keeps a small marker for its next token).
	defer exredis.Forget(ctx, admin, counterKey, dsync.DefaultKeyPrefix+":{quickstart}:*")

	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		rc, err := srv.Client()
		if err != nil {
			return err
		}
		defer rc.Close()
		client, err := dsync.NewClient(rc)
		if err != nil {
			return err
		}
		defer client.Close()
		m := client.NewMutex("quickstart")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < increments; i++ {
				m.Lock() // a sync.Locker, like sync.Mutex
				n, _ := rc.Do(ctx, rc.B().Get().Key(counterKey).Build()).AsInt64()
				rc.Do(ctx, rc.B().Set().Key(counterKey).Value(strconv.FormatInt(n+1, 10)).Build())
				m.Unlock()
			}
		}()
	}
	wg.Wait()

	// The context form: the lock context carries a fencing token.
	c, err := dsync.NewClient(admin)
	if err != nil {
		return err
	}
	defer c.Close()
	m := c.NewMutex("quickstart")
	lctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	token, _ := dsync.FencingToken(lctx)
	total, _ := admin.Do(ctx, admin.B().Get().Key(counterKey).Build()).AsInt64()
	if err := m.UnlockContext(lctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d workers x %d increments = %d (want %d) in %v\n", workers, increments, total, workers*increments, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "fencing token of the last acquisition: %d\n", token)
	if total != workers*increments {
		return errors.New("updates were lost")
	}
	return nil
}
