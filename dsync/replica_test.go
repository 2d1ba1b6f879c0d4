package dsync_test

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
)

// TestReplicaSync: an acquisition with WithReplicaSync is on the replica
// when it returns; with the replica stalled (SIGSTOP) it fails with
// ErrNotReplicated and leaves the lock free; after SIGCONT it works again.
func TestReplicaSync(t *testing.T) {
	// No diskless-sync delay (5s by default): the replica syncs at once.
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	// The master counts a replica for WAIT once it is online (it has
	// acknowledged its initial sync).
	waitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, err := master.Do(t, "INFO", "replication").ToString()
		return err == nil && strings.Contains(info, "state=online")
	})
	prefix := testPrefix(t)
	c := newClientOn(t, master.Client(t), dsync.WithKeyPrefix(prefix))
	key := prefix + ":{r}:mutex"
	ctx := ctxT(t)
	// A generous bound where the replica runs: its first acknowledgement
	// after a full sync can be slow on a loaded machine.
	m := c.NewMutex("r", dsync.WithReplicaSync(1, 2*time.Second))

	lctx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := dsync.OwnerOf(lctx)
	// WAIT returned: the replica has the hold already, no polling needed.
	if v, err := replica.Do(t, "GET", key).ToString(); err != nil || !strings.HasPrefix(v, owner+" ") {
		t.Fatalf("replica has %q, %v; want the owner's hold", v, err)
	}
	if err := m.UnlockContext(lctx); err != nil {
		t.Fatal(err)
	}

	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			replica.Signal(syscall.SIGCONT)
		}
	}()
	start := time.Now()
	_, err = c.NewMutex("r", dsync.WithReplicaSync(1, 300*time.Millisecond)).LockContext(ctx)
	if !errors.Is(err, dsync.ErrNotReplicated) {
		t.Fatalf("with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("failed after %v; the sync timeout is 300ms", took)
	}
	// Nothing left behind: the master holds no lock.
	if v, err := master.Do(t, "GET", key).ToString(); err == nil && !strings.HasPrefix(v, "- ") {
		t.Fatalf("master left holding %q", v)
	} else if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	// Without the option the lock is simply taken.
	l2, ok, err := c.NewMutex("r").TryLockContext(ctx)
	if !ok || err != nil {
		t.Fatalf("lock not free after the failed synced acquisition: %v %v", ok, err)
	}
	c.NewMutex("r").UnlockContext(l2)

	replica.Signal(syscall.SIGCONT)
	stopped = false
	lctx, err = m.LockContext(ctx)
	if err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
	m.UnlockContext(lctx)
}

// TestReplicaSyncCluster: the synced acquisition runs on the slot's master
// through a cluster client, whose masters each have one replica.
func TestReplicaSyncCluster(t *testing.T) {
	prefix := testPrefix(t)
	c := newClientOn(t, clusterRueidis(t), dsync.WithKeyPrefix(prefix))
	ctx := ctxT(t)
	for _, name := range namesOnMasters(t, prefix) {
		m := c.NewMutex(name, dsync.WithReplicaSync(1, time.Second))
		lctx, err := m.LockContext(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := m.UnlockContext(lctx); err != nil {
			t.Fatal(err)
		}
		// Two replicas are more than any master has.
		if _, err := c.NewMutex(name, dsync.WithReplicaSync(2, 50*time.Millisecond)).LockContext(ctx); !errors.Is(err, dsync.ErrNotReplicated) {
			t.Fatalf("%s: asking 2 replicas of 1 = %v, want ErrNotReplicated", name, err)
		}
	}
}
