package dsync_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
)

// A MultiLock holds several names as one. Two processes that name the same
// accounts in opposite orders do not deadlock: every MultiLock takes its
// members in one order.
func ExampleMultiLock() {
	cs, stop := exampleClients(2) // two processes
	defer stop()
	ctx := context.Background()

	var balance [2]atomic.Int64 // accounts a and b, in a store both processes write
	balance[0].Store(100)
	balance[1].Store(100)
	var wg sync.WaitGroup
	for i, names := range [][]string{{"account:a", "account:b"}, {"account:b", "account:a"}} {
		transfer := cs[i].NewMultiLock(names)
		from, to := i, 1-i
		wg.Go(func() {
			for range 10 {
				lctx, err := transfer.LockContext(ctx)
				if err != nil {
					log.Fatal(err)
				}
				balance[from].Add(-5)
				balance[to].Add(5)
				if err := transfer.UnlockContext(lctx); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println(balance[0].Load(), balance[1].Load())
	// Output: 100 100
}
