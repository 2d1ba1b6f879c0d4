// Quickstart: several workers, each with its own dsync.Client (as if in
// separate processes), increment one counter kept in a file, under a
// dsync.Mutex. The read-modify-write of the file is not atomic, so without
// the lock updates would be lost.
//
//	go run ./examples/quickstart                             # an embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart   # your Redis
//
// It uses only dsync's public API: copy it as it is.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
)

const (
	workers    = 4
	increments = 25
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	ctx := context.Background()

	// dial opens a Client, one per process in a real service. Without
	// REDIS_ADDR, an in-process server stands in for Redis, so this runs
	// with nothing installed.
	addr := os.Getenv("REDIS_ADDR")
	dial := func(ctx context.Context) (*dsync.Client, error) { return dsync.Dial(ctx, addr) }
	if addr == "" {
		srv, err := dsynctest.StartEmbedded()
		if err != nil {
			return err
		}
		defer srv.Close()
		dial = func(ctx context.Context) (*dsync.Client, error) { return srv.Dial(ctx) }
		fmt.Fprintln(out, "using an embedded server (set REDIS_ADDR=host:port to use your Redis)")
	} else {
		fmt.Fprintln(out, "using Redis at", addr)
	}

	// The shared resource: a counter in a file.
	dir, err := os.MkdirTemp("", "quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	counter := filepath.Join(dir, "counter")

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		client, err := dial(ctx)
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
				err := increment(counter)
				m.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	// The context form: it waits only as long as ctx allows, and the lock
	// context carries a fencing token (and is cancelled if the lock is lost).
	client, err := dial(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	m := client.NewMutex("quickstart")
	lctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	token, _ := dsync.FencingToken(lctx)
	total, err := read(counter)
	if err := errors.Join(err, m.UnlockContext(lctx)); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d workers x %d increments = %d (want %d) in %v\n", workers, increments, total, workers*increments, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "fencing token of the last acquisition: %d\n", token)
	if total != workers*increments {
		return errors.New("updates were lost")
	}
	return nil
}

// increment reads the counter, and writes it back one higher.
func increment(file string) error {
	n, err := read(file)
	if err != nil {
		return err
	}
	return os.WriteFile(file, []byte(strconv.Itoa(n+1)), 0o600)
}

// read returns the counter, 0 if the file is not there yet.
func read(file string) (int, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(b))
}
