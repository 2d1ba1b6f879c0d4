package dsync_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// renewArgs records, per key, the argument the renewal batch
// (MutexRenewMany) last sent for it.
type renewArgs struct {
	rueidis.Client
	sha  string
	mu   sync.Mutex
	args map[string]string
}

func (r *renewArgs) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	// (A command's words are recycled once it is sent: read them first.)
	for _, c := range multi {
		cs := c.Commands()
		if len(cs) < 3 || cs[0] != "EVALSHA" || cs[1] != r.sha {
			continue
		}
		n, err := strconv.Atoi(cs[2])
		if err != nil || len(cs) != 3+n+1+n {
			panic("unexpected MutexRenewMany call: " + cs[2])
		}
		r.mu.Lock()
		for i := range n {
			r.args[cs[3+i]] = cs[3+n+1+i]
		}
		r.mu.Unlock()
	}
	return r.Client.DoMulti(ctx, multi...)
}

func (r *renewArgs) get(key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.args[key]
	return a, ok
}

// The renewal batch sends a common Mutex hold (count 1, no flags) as its
// lock's value itself, "<owner> <token> 1", so that the script compares it
// whole with the value it reads (interned strings: none made, issue 40's
// cheaper renewal; mutex_renew_many.lua), whether the owner was made for
// the acquisition (the hold's value bytes follow the owner's: ownerTag) or
// the context brought it (built by the renewal loop). A hold whose value
// differs (a waiter's mark) is still renewed, by its prefix.
func TestRenewalSendsTheValue(t *testing.T) {
	s := redistest.Start(t)
	sha, ok := scripts.SHA1(scripts.MutexRenewMany)
	require.True(t, ok)
	rec := &renewArgs{Client: s.Client(t), sha: sha, args: map[string]string{}}
	c := newClientOn(t, rec, dsync.WithLease(900*time.Millisecond), dsync.WithKeyPrefix("rv"))
	other := newClientOn(t, s.Client(t), dsync.WithKeyPrefix("rv"))
	ctx := ctxT(t)
	fresh, err := c.NewMutex("fresh").LockContext(ctx)
	require.NoError(t, err)
	owned, err := c.NewMutex("owned").LockContext(dsync.WithOwner(ctx))
	require.NoError(t, err)
	marked, err := c.NewMutex("marked").LockContext(ctx)
	require.NoError(t, err)
	// A waiter of another Client marks the value " w".
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := other.NewMutex("marked").LockContext(wctx)
		waited <- err
	}()
	rc := s.Client(t)
	value := func(key string) string {
		v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		require.NoError(t, err, key)
		return v
	}
	waitFor(t, 5*time.Second, "the waiter's mark", func() bool {
		v := value("rv:{marked}:mutex")
		return len(v) > 2 && v[len(v)-2:] == " w"
	})
	// Two rounds after the mark: each hold's latest argument is from a
	// round that saw it.
	keys := []string{"rv:{fresh}:mutex", "rv:{owned}:mutex", "rv:{marked}:mutex"}
	rec.mu.Lock()
	clear(rec.args)
	rec.mu.Unlock()
	waitFor(t, 5*time.Second, "a renewal round of every hold", func() bool {
		for _, k := range keys {
			if _, ok := rec.get(k); !ok {
				return false
			}
		}
		return true
	})
	checked := 0
	for _, k := range keys[:2] {
		a, _ := rec.get(k)
		require.Equal(t, value(k), a, "renewal argument of %s", k)
		checked++
	}
	require.Equal(t, 2, checked)
	a, _ := rec.get(keys[2])
	v := value(keys[2])
	require.Equal(t, v[:len(v)-len(" w")], a, "renewal argument of %s (the value less the waiter's mark)", keys[2])
	// More than a lease later every hold is still held: renewed.
	rec.mu.Lock()
	clear(rec.args)
	rec.mu.Unlock()
	for range 4 { // 4 rounds of lease/3: more than a lease
		waitFor(t, 5*time.Second, "a renewal round", func() bool { _, ok := rec.get(keys[2]); return ok })
		rec.mu.Lock()
		clear(rec.args)
		rec.mu.Unlock()
	}
	for _, l := range []context.Context{fresh, owned, marked} {
		require.NoError(t, l.Err(), "hold lost: %v", context.Cause(l))
	}
	stop()
	require.Error(t, <-waited)
}
