// Command swap shows that a dsync.Mutex is a drop-in sync.Locker: the same
// Bank code runs first with a sync.Mutex among goroutines, then with a
// dsync.Mutex among several processes (this program re-executes itself),
// and the invariant the lock protects, that money is only moved, never
// created or lost, holds in both.
//
//	go run ./examples/swap                  # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/swap
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/examples/internal/exredis"
	"github.com/redis/rueidis"
)

const total = 1000 // money in the bank, split over the two accounts

// A Bank moves money between two accounts. Its state lives in a store, and
// mu guards it: a *sync.Mutex when the Bank is shared by goroutines, a
// *dsync.Mutex when it is shared by processes. Nothing else changes.
type Bank struct {
	mu sync.Locker
	st store
}

// Transfer moves n from one account to the other: a read-modify-write of
// two values that must look atomic to everyone else.
func (b *Bank) Transfer(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, c := b.st.get("a"), b.st.get("b")
	b.st.set("a", a-n)
	b.st.set("b", c+n)
}

// Audit returns the sum of both accounts, read under the lock.
func (b *Bank) Audit() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st.get("a") + b.st.get("b")
}

type store interface {
	get(k string) int
	set(k string, v int)
}

// memStore is process memory: enough for goroutines.
type memStore map[string]int

func (m memStore) get(k string) int    { return m[k] }
func (m memStore) set(k string, v int) { m[k] = v }

// redisStore keeps the accounts in Redis, where every process sees them.
// It is deliberately plain GET and SET: the lock makes them atomic together.
type redisStore struct {
	rc     rueidis.Client
	prefix string
}

func (r redisStore) get(k string) int {
	n, err := r.rc.Do(context.Background(), r.rc.B().Get().Key(r.prefix+k).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		log.Fatal(err)
	}
	return int(n)
}

func (r redisStore) set(k string, v int) {
	if err := r.rc.Do(context.Background(), r.rc.B().Set().Key(r.prefix+k).Value(strconv.Itoa(v)).Build()).Error(); err != nil {
		log.Fatal(err)
	}
}

func main() {
	procs := flag.Int("procs", 3, "processes sharing the dsync.Mutex")
	transfers := flag.Int("transfers", 200, "transfers per process (and per goroutine)")
	flag.Parse()
	if os.Getenv("SWAP_CHILD") != "" {
		child()
		return
	}
	if err := run(os.Stdout, *procs, *transfers); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer, procs, transfers int) error {
	// 1. Goroutines and sync.Mutex.
	bank := &Bank{mu: &sync.Mutex{}, st: memStore{"a": total}}
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for range transfers {
				bank.Transfer(rand.IntN(21) - 10)
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(out, "sync.Mutex:  %d goroutines x %d transfers, a+b = %d (want %d)\n", procs, transfers, bank.Audit(), total)

	// 2. Processes and dsync.Mutex.
	srv, err := exredis.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(out, "server:", srv.Describe())
	prefix := fmt.Sprintf("swap-example-%d-%d:", os.Getpid(), time.Now().UnixNano())
	rc, err := srv.Client()
	if err != nil {
		return err
	}
	defer rc.Close()
	defer exredis.Forget(context.Background(), rc, prefix+"*") // the accounts and the locks
	st := redisStore{rc, prefix}
	st.set("a", total)
	st.set("b", 0)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "SWAP_CHILD=1", "SWAP_PREFIX="+prefix, "REDIS_ADDR="+srv.Addr,
			"SWAP_TRANSFERS="+strconv.Itoa(transfers), "SWAP_RESP2="+strconv.FormatBool(srv.Embedded))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds[i] = cmd
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("a child failed: %w", err)
		}
	}
	sum := st.get("a") + st.get("b")
	fmt.Fprintf(out, "dsync.Mutex: %d processes x %d transfers, a+b = %d (want %d)\n", procs, transfers, sum, total)
	if sum != total {
		return fmt.Errorf("the invariant broke: a+b = %d", sum)
	}
	fmt.Fprintln(out, "the invariant held in both")
	return nil
}

// child is one process of part 2: the same Bank, with a dsync.Mutex.
func child() {
	transfers, _ := strconv.Atoi(os.Getenv("SWAP_TRANSFERS"))
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{os.Getenv("REDIS_ADDR")},
		AlwaysRESP2:  os.Getenv("SWAP_RESP2") == "true", // the embedded server speaks RESP2
		DisableCache: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	prefix := os.Getenv("SWAP_PREFIX")
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(prefix+"locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	bank := &Bank{mu: c.NewMutex("bank"), st: redisStore{rc, prefix}}
	for i := range transfers {
		bank.Transfer(rand.IntN(21) - 10)
		if i%50 == 0 {
			if sum := bank.Audit(); sum != total {
				log.Fatalf("pid %d saw a+b = %d mid-run", os.Getpid(), sum)
			}
		}
	}
}
