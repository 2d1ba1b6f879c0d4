package dsynctest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"testing"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
)

// withdraw is the code under test: it takes amount from an account under
// the account's lock, which every process of the service shares.
func withdraw(ctx context.Context, c *dsync.Client, balances map[string]int, account string, amount int) error {
	m := c.NewMutex("account:" + account)
	lctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	defer m.UnlockContext(lctx)
	if balances[account] < amount {
		return errors.New("insufficient funds")
	}
	balances[account] -= amount
	return nil
}

// TestWithdraw is how a package's unit test gets a Client: one line, with
// or without Redis on the machine.
func TestWithdraw(t *testing.T) {
	c := dsynctest.NewClient(t) // closed, with its server, when the test ends

	balances := map[string]int{"alice": 100}
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() { _ = withdraw(t.Context(), c, balances, "alice", 10) })
	}
	wg.Wait()
	if balances["alice"] != 0 {
		t.Fatalf("balance %d, want 0: two withdrawals overlapped", balances["alice"])
	}
}

// Outside a test (a TestMain, a program), Start a server and Dial it; in a
// test, dsynctest.NewClient(t) does both and cleans up. Two Clients of one
// server share their locks, like two processes of a service.
func ExampleStart() {
	srv, err := dsynctest.Start() // redis-server when on PATH, else in-process
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	a, err := srv.Dial(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := srv.Dial(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	lctx, err := a.NewMutex("report").LockContext(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, ok, err := b.NewMutex("report").TryLockContext(ctx)
	fmt.Println("b took it while a held it:", ok, err)
	if err := a.NewMutex("report").UnlockContext(lctx); err != nil {
		log.Fatal(err)
	}
	// Output: b took it while a held it: false <nil>
}
