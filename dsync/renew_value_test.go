package dsync_test

import (
	"context"
	"fmt"
	"regexp"
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
// (or the session's, MutexRenewSession, whose first key is the session
// key and whose first three arguments are the lease, the session and the
// batch's mode).
type renewArgs struct {
	rueidis.Client
	sha, sessSHA string
	mu           sync.Mutex
	args         map[string]string
}

func (r *renewArgs) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	// (A command's words are recycled once it is sent: read them first.)
	for _, c := range multi {
		cs := c.Commands()
		if len(cs) < 3 || cs[0] != "EVALSHA" || (cs[1] != r.sha && cs[1] != r.sessSHA) {
			continue
		}
		n, err := strconv.Atoi(cs[2])
		head := 0 // keys before the holds'
		if cs[1] == r.sessSHA {
			head = 1
		}
		// keys, the lease, (the session and the batch's mode), the holds'
		if err != nil || len(cs) != 3+n+1+2*head+n-head {
			panic("unexpected renewal batch call: " + cs[2])
		}
		r.mu.Lock()
		for i := head; i < n; i++ {
			r.args[cs[3+i]] = cs[3+n+1+2*head+i-head]
		}
		r.mu.Unlock()
	}
	return r.Client.DoMulti(ctx, multi...)
}

// unbound is a Mutex value less its binding to a renewal session
// (" s<sid>", mutex_renew_session.lua).
func unbound(v string) string { return sessionBinding.ReplaceAllString(v, "") }

var sessionBinding = regexp.MustCompile(` s[0-9]+`)

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
// differs (a waiter's mark) is still renewed, by its prefix. With the
// Client's renewal session the value may also be bound to it (" s<sid>"):
// the argument is the same, the value less its binding.
func TestRenewalSendsTheValue(t *testing.T) {
	for _, every := range []int{5, 0} {
		t.Run(fmt.Sprintf("session-every-%d", every), func(t *testing.T) { testRenewalSendsTheValue(t, every) })
	}
}

func testRenewalSendsTheValue(t *testing.T, every int) {
	s := redistest.Start(t)
	sha, ok := scripts.SHA1(scripts.MutexRenewMany)
	require.True(t, ok)
	sessSHA, ok := scripts.SHA1(scripts.MutexRenewSession)
	require.True(t, ok)
	rec := &renewArgs{Client: s.Client(t), sha: sha, sessSHA: sessSHA, args: map[string]string{}}
	c := newClientOn(t, rec, dsync.WithLease(900*time.Millisecond), dsync.WithKeyPrefix("rv"), dsync.WithSessionEvery(every))
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
		require.Equal(t, unbound(value(k)), a, "renewal argument of %s", k)
		checked++
	}
	require.Equal(t, 2, checked)
	a, _ := rec.get(keys[2])
	v := unbound(value(keys[2]))
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
	for _, k := range keys {
		// Held more than a lease: bound to the session, if there is one.
		require.Equal(t, every > 0, sessionBinding.MatchString(value(k)), "%s: %q", k, value(k))
	}
	stop()
	require.Error(t, <-waited)
}
