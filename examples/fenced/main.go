// Command fenced shows fencing against a real database: SQLite, through a
// pure-Go driver (modernc.org/sqlite, no C toolchain).
//
// Two workers, each with its own dsync.Client as two processes would have,
// update one row under the lock "order:1". worker-1 takes the lock and is
// then paused (a stop-the-world GC, a VM migration, a SIGSTOP) past its
// lease. The lock runs out, worker-2 takes it with a larger fencing token
// and writes. When worker-1 wakes up it still believes it holds the lock and
// writes: the database refuses, because its token is smaller than the one
// the row carries.
//
// The write is one statement that checks and sets the row's fence:
//
//	UPDATE orders SET status = ?, fence = $token WHERE id = ? AND fence < $token
//
// Why it is safe: the check and the write are one statement, so no other
// write comes between them. SQLite runs one write transaction at a time
// (serializable); PostgreSQL, at its default READ COMMITTED, locks the row
// and, if another transaction changed it meanwhile, evaluates the WHERE
// again on the committed row before it writes, so READ COMMITTED is enough.
// What is not safe: reading the fence in one statement and writing in
// another (check, then act), unless the read is SELECT ... FOR UPDATE or
// the transaction is SERIALIZABLE. A write that spans more rows or tables
// does the fenced UPDATE first in its transaction and the others only if
// it changed one row; the row lock it takes keeps older tokens out until
// COMMIT.
//
// When the write is refused (rows affected 0), the lock was lost: another
// holder has written since. Stop, roll back what the transaction did, and
// do not retry with the same token; if the work must still be done, take
// the lock again (a new token) and read the row again.
//
// `fence < $token` lets each token write the row once; a holder that
// writes the row several times under one acquisition uses `fence <=
// $token` (tokens are unique per acquisition while Redis keeps its data).
//
//	go run ./examples/fenced                             # embedded server
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/fenced   # your Redis
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/dsynctest"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go
)

// errFenced is a write the database refused: a newer holder wrote first.
var errFenced = errors.New("write refused by the fence: the lock was lost")

// ship marks the order shipped by who, if token is newer than the token of
// the row's last write, and records it in the order's history: one
// transaction, the fenced UPDATE first. It returns errFenced, having
// changed nothing, when the row has seen a newer token.
func ship(ctx context.Context, db *sql.DB, id int, who string, token uint64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, does nothing
	res, err := tx.ExecContext(ctx,
		`UPDATE orders SET status = ?, fence = ? WHERE id = ? AND fence < ?`,
		"shipped by "+who, int64(token), id, int64(token))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errFenced // nothing else written; Rollback ends the transaction
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO history (order_id, event, fence) VALUES (?, ?, ?)`,
		id, "shipped by "+who, int64(token)); err != nil {
		return err
	}
	return tx.Commit()
}

// openDB opens (creating) the SQLite database in dir with order 1 in it.
// _txlock=immediate takes the write lock at BEGIN, and busy_timeout makes
// a writer wait for another's transaction instead of failing at once.
func openDB(ctx context.Context, dir string) (*sql.DB, error) {
	dsn := "file:" + filepath.Join(dir, "orders.db") + "?_txlock=immediate&_pragma=busy_timeout(5000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	_, err = db.ExecContext(ctx, `
		CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0);
		CREATE TABLE history (order_id INTEGER NOT NULL, event TEXT NOT NULL, fence INTEGER NOT NULL);
		INSERT INTO orders (id, status) VALUES (1, 'new');`)
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Result is what a run did, for the test.
type Result struct {
	Token1, Token2 uint64 // the workers' fencing tokens
	Refused        bool   // worker-1's late write was refused
	Status         string // the row's final status
	Fence          uint64 // and fence
	History        []string
}

// lease is worker-1's lease: fixed (no watchdog), as a paused process's
// lock is, since its renewals pause with it.
const lease = time.Second

func main() {
	if _, err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) (Result, error) {
	var res Result
	out := &lockedWriter{w: w}
	ctx := context.Background()

	addr := os.Getenv("REDIS_ADDR")
	dial := func(ctx context.Context) (*dsync.Client, error) { return dsync.Dial(ctx, addr) }
	if addr == "" {
		srv, err := dsynctest.StartEmbedded()
		if err != nil {
			return res, err
		}
		defer srv.Close()
		dial = func(ctx context.Context) (*dsync.Client, error) { return srv.Dial(ctx) }
		fmt.Fprintln(out, "using an embedded server (set REDIS_ADDR=host:port to use your Redis)")
	}
	dir, err := os.MkdirTemp("", "fenced")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	db, err := openDB(ctx, dir)
	if err != nil {
		return res, err
	}
	defer db.Close()

	c1, err := dial(ctx)
	if err != nil {
		return res, err
	}
	defer c1.Close()
	c2, err := dial(ctx)
	if err != nil {
		return res, err
	}
	defer c2.Close()

	held := make(chan struct{})  // worker-1 holds the lock
	wrote := make(chan struct{}) // worker-2 has written
	var wg sync.WaitGroup
	var err1, err2 error
	wg.Go(func() {
		m := c1.NewMutex("order:1", dsync.WithLeaseTime(lease))
		lctx, err := m.LockContext(ctx)
		close(held)
		if err != nil {
			err1 = err
			return
		}
		res.Token1, _ = dsync.FencingToken(lctx)
		fmt.Fprintf(out, "worker-1: holds the lock, token %d; paused...\n", res.Token1)
		// The pause: this goroutine does nothing until worker-2 has
		// written. A real pause sends no such signal; waiting for it makes
		// the run the same on every machine. Checking lctx.Err() before
		// the write would not help: the pause can fall between the check
		// and the write, as it does here.
		<-wrote
		fmt.Fprintf(out, "worker-1: awake; writes with token %d (lock context: %v)\n", res.Token1, context.Cause(lctx))
		// Under lctx (as worker-2 writes) the write would stop on the
		// lock context's end; under ctx it shows what the database does
		// when the holder has not learnt of the loss yet.
		switch err := ship(ctx, db, 1, "worker-1", res.Token1); {
		case errors.Is(err, errFenced):
			res.Refused = true
			fmt.Fprintln(out, "worker-1: refused (0 rows): the lock was lost; stopping")
			return // UnlockContext would return ErrNotHeld: nothing to release
		case err != nil:
			err1 = err
		default:
			err1 = errors.New("worker-1's late write was accepted")
		}
		m.UnlockContext(lctx)
	})
	<-held
	wg.Go(func() {
		defer close(wrote)
		m := c2.NewMutex("order:1")
		lctx, err := m.LockContext(ctx) // waits for worker-1's lease to run out
		if err != nil {
			err2 = err
			return
		}
		defer m.UnlockContext(lctx)
		res.Token2, _ = dsync.FencingToken(lctx)
		fmt.Fprintf(out, "worker-2: holds the lock, token %d\n", res.Token2)
		if err := ship(lctx, db, 1, "worker-2", res.Token2); err != nil {
			err2 = fmt.Errorf("worker-2: %w", err)
			return
		}
		fmt.Fprintf(out, "worker-2: wrote with token %d\n", res.Token2)
	})
	wg.Wait()
	if err := errors.Join(err1, err2); err != nil {
		return res, err
	}

	var fence int64
	if err := db.QueryRowContext(ctx, `SELECT status, fence FROM orders WHERE id = 1`).Scan(&res.Status, &fence); err != nil {
		return res, err
	}
	res.Fence = uint64(fence)
	rows, err := db.QueryContext(ctx, `SELECT event, fence FROM history WHERE order_id = 1 ORDER BY rowid`)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var event string
		if err := rows.Scan(&event, &fence); err != nil {
			return res, err
		}
		res.History = append(res.History, fmt.Sprintf("%s (token %d)", event, fence))
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "order 1: %q, fence %d; history: %q\n", res.Status, res.Fence, res.History)
	return res, nil
}

// lockedWriter lets both workers print to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
