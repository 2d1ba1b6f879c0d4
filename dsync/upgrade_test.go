package dsync_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// A rolling upgrade: Clients of the protocol before issue 40 (the Mutex's
// acquire and release scripts of 2b61d0b, in testdata, sent as that
// version sent them: EVALSHA, owner, lease and the waiting Client) and
// Clients of this one (functions, the acquire's one-argument form, owners
// named after their Client) take the same names at once. Every
// acquisition must be alone in its critical section, and the fencing
// tokens, read in the order the holds began, must rise.
func TestRollingUpgradeMutex(t *testing.T) {
	s := redistest.Start(t)
	oldAcquire, oldRelease := oldMutexScripts(t)

	const names, perWorker = 3, 150
	var (
		inside   [names]atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		tokens   [names][]uint64
		byOld    atomic.Int64
		byNew    atomic.Int64
		oldHeld  atomic.Int64 // old acquires that found the lock held
	)
	// enter and leave bracket a critical section of lock i with token tok.
	enter := func(i int, tok uint64) {
		if inside[i].Add(1) != 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		tokens[i] = append(tokens[i], tok)
		mu.Unlock()
	}
	leave := func(i int) { inside[i].Add(-1) }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	// The old protocol, as its Client sent it: a fresh owner per
	// acquisition ("<name>/<32 hex digits>"), the lease, the waiting
	// Client; a wait that finds the lock held tries again shortly after
	// (the old Client waited for the wakeup or the holder's lease: here it
	// polls, which only makes it contend harder).
	for w := range 2 {
		rc := s.Client(t)
		ident := "old" + strconv.Itoa(w) + "/0123456789abcdef"
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perWorker {
				i := n % names
				key := "up:{n" + strconv.Itoa(i) + "}:mutex"
				var b [16]byte
				_, _ = rand.Read(b[:])
				owner := "old" + strconv.Itoa(w) + "/" + hex.EncodeToString(b[:])
				var tok int64
				for {
					msg, err := oldAcquire.Exec(ctx, rc, []string{key}, []string{owner, "30000", ident}).ToMessage()
					if err != nil {
						t.Errorf("old acquire: %v", err)
						return
					}
					if msg.IsInt64() {
						tok, _ = msg.AsInt64()
						break
					}
					oldHeld.Add(1)
					time.Sleep(100 * time.Microsecond) // (pacing an emulated waiter, no assertion waits on it)
				}
				enter(i, uint64(tok))
				byOld.Add(1)
				leave(i)
				code, err := oldRelease.Exec(ctx, rc, []string{key}, []string{owner + " " + strconv.FormatInt(tok, 10) + " "}).AsInt64()
				if err != nil || code != 1 {
					t.Errorf("old release of %s: %d, %v", key, code, err)
					return
				}
			}
		}()
	}
	// The new protocol: two Clients, two goroutines each.
	for range 2 {
		c := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("up"))
		<-dsync.Preloaded(c)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range perWorker {
					i := n % names
					m := c.NewMutex("n" + strconv.Itoa(i))
					lctx, err := m.LockContext(ctx)
					if err != nil {
						t.Errorf("new LockContext: %v", err)
						return
					}
					tok, _ := dsync.FencingToken(lctx)
					enter(i, tok)
					byNew.Add(1)
					leave(i)
					if err := m.UnlockContext(lctx); err != nil {
						t.Errorf("new UnlockContext: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "critical sections that overlapped")
	require.EqualValues(t, 2*perWorker, byOld.Load(), "acquisitions by the old protocol")
	require.EqualValues(t, 4*perWorker, byNew.Load(), "acquisitions by the new protocol")
	require.NotZero(t, oldHeld.Load(), "old acquires that found a lock held: the two protocols never met")
	for i := range names {
		for j := 1; j < len(tokens[i]); j++ {
			require.Greater(t, tokens[i][j], tokens[i][j-1], "lock n%d: token %d of %d did not rise", i, j, len(tokens[i]))
		}
	}
}

// A rolling upgrade beside the renewal session: a Client of the protocol
// before it (the Mutex's acquire and release of 2b61d0b, as in
// TestRollingUpgradeMutex) never takes a lock bound to a live session,
// nor one whose session is gone (it does not know bindings: it waits for
// the key's backstop, liveness only, docs/design.md), while a Client of
// this protocol takes the latter at once; tokens keep rising across both.
func TestRollingUpgradeSessionBound(t *testing.T) {
	s := redistest.Start(t)
	oldAcquire, oldRelease := oldMutexScripts(t)
	rc := s.Client(t)
	ctx := ctxT(t)
	key := "up2:{m}:mutex"
	oldTry := func() (int64, bool) {
		t.Helper()
		msg, err := oldAcquire.Exec(ctx, rc, []string{key}, []string{"old/0123456789abcdef0123456789abcdef", "30000", "old/0123456789abcdef"}).ToMessage()
		require.NoError(t, err)
		if msg.IsInt64() {
			tok, _ := msg.AsInt64()
			return tok, true
		}
		return 0, false
	}
	a := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("up2"), dsync.WithLease(sessionLease))
	b := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("up2"), dsync.WithLease(sessionLease))
	la, err := a.NewMutex("m").LockContext(ctx)
	require.NoError(t, err)
	ta, _ := dsync.FencingToken(la)
	sess := sessionOf(t, rc, "up2", key)
	_, ok := oldTry()
	require.False(t, ok, "the old protocol took a lock bound to a live session")
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(sess).Build()).Error())
	_, ok = oldTry()
	require.False(t, ok, "the old protocol took a bound lock (it cannot tell its session is gone)")
	lb, ok, err := b.NewMutex("m").TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the new protocol takes a lock whose session is gone")
	tb, _ := dsync.FencingToken(lb)
	require.Greater(t, tb, uint64(ta))
	require.NoError(t, b.NewMutex("m").UnlockContext(lb))
	told, ok := oldTry()
	require.True(t, ok, "the old protocol takes the lock once the new one released it")
	require.Greater(t, uint64(told), tb, "tokens rise across the protocols")
	code, err := oldRelease.Exec(ctx, rc, []string{key}, []string{"old/0123456789abcdef0123456789abcdef " + strconv.FormatInt(told, 10) + " "}).AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 1, code)
}

// oldMutexScripts are the Mutex's acquire and release scripts of the
// protocol before issue 40 (2b61d0b, in testdata).
func oldMutexScripts(t *testing.T) (acquire, release *rueidis.Lua) {
	t.Helper()
	acqSrc, err := os.ReadFile("testdata/protocol-2b61d0b/mutex_acquire.lua")
	require.NoError(t, err)
	relSrc, err := os.ReadFile("testdata/protocol-2b61d0b/mutex_release.lua")
	require.NoError(t, err)
	return rueidis.NewLuaScript(string(acqSrc)), rueidis.NewLuaScript(string(relSrc))
}
