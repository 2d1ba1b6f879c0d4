package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	var err error
	srv, err = redistest.StartServer()
	if err != nil && os.Getenv("CI") != "" {
		fmt.Fprintln(os.Stderr, "redis-server is required under CI:", err)
		os.Exit(1)
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var prefixSeq atomic.Int64

// env is a test's view of the command's environment: REDIS_ADDR points at
// the test server, and a prefix of its own.
type env struct {
	t      *testing.T
	prefix string
	vars   map[string]string
}

func newEnv(t *testing.T) *env {
	redistest.Require(t)
	require.NotNil(t, srv, "the shared redis-server did not start")
	return &env{t: t, prefix: fmt.Sprintf("cli%d-%d", os.Getpid(), prefixSeq.Add(1)), vars: map[string]string{"REDIS_ADDR": srv.Addr}}
}

func (e *env) client() *dsync.Client {
	c, err := dsync.NewClient(srv.Client(e.t), dsync.WithKeyPrefix(e.prefix))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { c.Close() })
	return c
}

// syncBuffer is written by the command and read by the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (e *env) run(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb syncBuffer
	code = run(ctx, append([]string{"--prefix", e.prefix}, args...), func(k string) string { return e.vars[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out after %v waiting for %s", d, what)
		time.Sleep(2 * time.Millisecond)
	}
}

// heldFair holds a fair mutex and queues two waiters behind it; it returns
// the owners in order: holder, first waiter, second waiter.
func heldFair(t *testing.T, e *env, name string) []string {
	c := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hctx := dsync.WithOwner(ctx)
	_, err := c.NewFairMutex(name).LockContext(hctx)
	require.NoError(t, err)
	h, _ := dsync.OwnerOf(hctx)
	owners := []string{h}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := range 2 {
		wc := e.client()
		wctx := dsync.WithOwner(ctx)
		o, _ := dsync.OwnerOf(wctx)
		owners = append(owners, o)
		wg.Go(func() { _, _ = wc.NewFairMutex(name).LockContext(wctx) })
		waitFor(t, 5*time.Second, "the waiter to queue", func() bool {
			st, _ := c.Inspect(ctx, name)
			return len(st) == 1 && len(st[0].Waiters) == i+1
		})
	}
	return owners
}

func TestCLIInspectFairWithWaiters(t *testing.T) {
	e := newEnv(t)
	owners := heldFair(t, e, "orders")
	code, out, errs := e.run(context.Background(), "inspect", "orders")
	require.Equal(t, 0, code, "exit %d: %s", code, errs)
	t.Logf("dsync inspect orders:\n%s", out)
	i0, i1, i2 := strings.Index(out, "holder  "+owners[0]), strings.Index(out, "1. "+owners[1]), strings.Index(out, "2. "+owners[2])
	assert.True(t, strings.HasPrefix(out, "fair_mutex orders\n"), "inspect output lacks the holder and the waiters in order:\n%s", out)
	assert.GreaterOrEqual(t, i0, 0, "inspect output lacks the holder and the waiters in order:\n%s", out)
	assert.GreaterOrEqual(t, i1, i0, "inspect output lacks the holder and the waiters in order:\n%s", out)
	assert.GreaterOrEqual(t, i2, i1, "inspect output lacks the holder and the waiters in order:\n%s", out)

	code, out, errs = e.run(context.Background(), "inspect", "--json", "orders")
	require.Equal(t, 0, code, "exit %d: %s", code, errs)
	var js []jsonState
	require.NoError(t, json.Unmarshal([]byte(out), &js), "--json output %q", out)
	if assert.Len(t, js, 1, "--json = %+v", js) {
		assert.True(t, js[0].Held, "--json = %+v", js)
		if assert.NotEmpty(t, js[0].Holders, "--json = %+v", js) {
			assert.Equal(t, owners[0], js[0].Holders[0].Owner, "--json = %+v", js)
			assert.Greater(t, js[0].Holders[0].LeaseMS, int64(0), "--json = %+v", js)
		}
		if assert.Len(t, js[0].Waiters, 2, "--json = %+v", js) {
			assert.Equal(t, owners[1], js[0].Waiters[0].Owner, "--json = %+v", js)
			assert.Equal(t, owners[2], js[0].Waiters[1].Owner, "--json = %+v", js)
		}
	}
}

func TestCLIErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		vars map[string]string
		code int
		msg  string
	}{
		{[]string{"inspect", "nope"}, nil, 1, `no lock named "nope"`},
		{[]string{"inspect", "x"}, map[string]string{"REDIS_ADDR": "127.0.0.1:1"}, 1, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"--addr", "127.0.0.1:1", "list"}, nil, 1, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"inspect"}, nil, 2, "inspect takes NAME"},
		{[]string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{nil, nil, 2, "no command"},
		{[]string{"--bogus", "list"}, nil, 2, "flag provided but not defined"},
		{[]string{"unlock", "x"}, nil, 2, "refusing to unlock"},
		{[]string{"unlock", "--force", "x"}, nil, 2, "refusing to unlock"},
		{[]string{"inspect", ""}, nil, 1, "invalid argument"},
	} {
		old := e.vars
		if tc.vars != nil {
			e.vars = tc.vars
		}
		code, _, errs := e.run(ctx, tc.args...)
		e.vars = old
		assert.Equal(t, tc.code, code, "dsync %q: exit status", tc.args)
		assert.Contains(t, errs, tc.msg, "dsync %q: stderr", tc.args)
	}
}

func TestCLIList(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	for _, n := range []string{"job:1", "job:2", "cron nightly"} {
		_, ok, err := c.NewMutex(n).TryLockContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	code, out, errs := e.run(ctx, "list")
	require.Equal(t, 0, code, "exit %d: %s", code, errs)
	want := "mutex      \"cron nightly\"\nmutex      job:1\nmutex      job:2\n"
	assert.Equal(t, want, out, "list")
	code, out, _ = e.run(ctx, "list", "job:*", "--json")
	assert.Equal(t, 0, code, "list job:* --json")
	assert.Equal(t, `[{"kind":"mutex","name":"job:1"},{"kind":"mutex","name":"job:2"}]`+"\n", out, "list job:* --json")
}

func TestCLIUnlockForce(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	hctx, err := c.NewMutex("stuck").LockContext(ctx)
	require.NoError(t, err)
	tok, _ := dsync.FencingToken(hctx)
	// Redis records the last token reserved with the acquisition: its own,
	// since no goroutine of its Client waited.
	got := make(chan error, 1)
	go func() {
		_, err := e.client().NewMutex("stuck").LockContext(ctx)
		got <- err
	}()
	// Refused without confirmation: still held.
	code, _, _ := e.run(ctx, "unlock", "--force", "stuck")
	require.Equal(t, 2, code, "unlock without --yes: exit")
	st, _ := c.Inspect(ctx, "stuck")
	require.Len(t, st, 1, "refused unlock changed the lock: %+v", st)
	require.Len(t, st[0].Holders, 1, "refused unlock changed the lock: %+v", st)
	// Both Clients listen for forced releases (subscribed in the background
	// when made) before the command runs.
	rc := srv.Client(t)
	forceCh := e.prefix + ":force"
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := rc.Do(ctx, rc.B().PubsubNumsub().Channel(forceCh).Build()).AsIntMap()
		require.NoError(t, err)
		if m[forceCh] >= 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the Clients did not subscribe to %s within 10 s", forceCh)
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	code, out, errs := e.run(ctx, "unlock", "--force", "--yes", "stuck")
	require.Equal(t, 0, code, "unlock: exit %d, out %q, err %q", code, out, errs)
	require.Contains(t, out, fmt.Sprintf("released mutex stuck held by %s (token %d)", ownerOf(hctx), tok), "unlock: exit %d, out %q, err %q", code, out, errs)
	// The holder was told at once, and the command says so.
	require.Contains(t, out, "its holder was told at once (Client ", "unlock: out %q", out)
	select {
	case <-hctx.Done():
		t.Logf("holder's lock context cancelled %v after the command began", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's lock context was not cancelled by the forced release")
	}
	require.ErrorIs(t, context.Cause(hctx), dsync.ErrLockLost)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the forced release")
	}
}

func ownerOf(ctx context.Context) string {
	o, _ := dsync.OwnerOf(ctx)
	return o
}

func TestCLIWatch(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--prefix", e.prefix, "--interval", "10ms", "watch", "w"}, func(k string) string { return e.vars[k] }, &out, &errb)
	}()
	waitFor(t, 5*time.Second, "the empty state", func() bool { return strings.Contains(out.String(), "(no lock named w)") })
	m := c.NewMutex("w")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "the holder", func() bool { return strings.Contains(out.String(), "holder  "+ownerOf(lctx)) })
	require.NoError(t, m.UnlockContext(lctx))
	waitFor(t, 5*time.Second, "the release", func() bool { return strings.Contains(out.String(), "free (last fencing token") })
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "watch ended with %d: %s", code, errb.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop on interrupt")
	}
	// Three states, each printed once although polled many times.
	n := strings.Count(out.String(), "--- ")
	assert.Equal(t, 3, n, "watch printed %d states, want 3:\n%s", n, out.String())
}

func TestCLIInspectSemaphore(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	_, err := c.NewSemaphore("pool", 4).Acquire(ctx, 3)
	require.NoError(t, err)
	code, out, errs := e.run(ctx, "inspect", "pool")
	require.Equal(t, 0, code, "exit %d, out %q, err %q", code, out, errs)
	require.Contains(t, out, "semaphore pool\n  permits 1 free of 4\n  holder  ", "exit %d, out %q, err %q", code, out, errs)
	require.Contains(t, out, "permits 3", "exit %d, out %q, err %q", code, out, errs)
	code, out, _ = e.run(ctx, "--json", "inspect", "pool")
	var js []jsonState
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.Equal(t, 0, code)
	if assert.Len(t, js, 1, "--json = %s", out) && assert.NotNil(t, js[0].Size, "--json = %s", out) {
		assert.Equal(t, int64(4), *js[0].Size, "--json = %s", out)
		assert.Equal(t, int64(1), *js[0].Free, "--json = %s", out)
		if assert.NotEmpty(t, js[0].Holders, "--json = %s", out) {
			assert.Equal(t, int64(3), js[0].Holders[0].Permits, "--json = %s", out)
		}
	}
	// unlock --force releases the semaphore's permits too; again, with
	// nothing held, it exits with the status of "nothing done".
	code, out, errs = e.run(ctx, "unlock", "--force", "--yes", "pool")
	assert.Equal(t, 0, code, "unlock of a semaphore: exit %d, stdout %q, stderr %q", code, out, errs)
	assert.Contains(t, out, "released semaphore pool 3 permits held by", "unlock of a semaphore: exit %d, stdout %q, stderr %q", code, out, errs)
	code, _, errs = e.run(ctx, "unlock", "--force", "--yes", "pool")
	assert.Equal(t, 3, code, "unlock of a free semaphore: exit status")
	assert.Contains(t, errs, "nothing released", "unlock of a free semaphore: stderr, want the reason")
}

// --help, -h and help [COMMAND] print help on stdout and exit 0; after a
// command, or named, the command's own help.
func TestCLIHelp(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "Commands:"},
		{[]string{"-h"}, "REDIS_ADDR"},
		{[]string{"help"}, "Exit status"},
		{[]string{"help", "unlock"}, "Both flags are required"},
		{[]string{"inspect", "--help"}, "dsync inspect NAME"},
		{[]string{"--json", "watch", "-h"}, "dsync watch NAME"},
	} {
		var out, errb syncBuffer
		code := run(ctx, tc.args, func(string) string { return "" }, &out, &errb)
		assert.Equal(t, 0, code, "%v: exit status", tc.args)
		assert.Contains(t, out.String(), tc.want, "%v: help on stdout", tc.args)
		assert.Equal(t, "", errb.String(), "%v: stderr", tc.args)
	}
}

func TestCLIAuth(t *testing.T) {
	redistest.Require(t)
	s := redistest.Start(t)
	require.NoError(t, s.Do(t, "ACL", "SETUSER", "ops", "on", ">opspass", "~*", "&*", "+@all").Error())
	require.NoError(t, s.Do(t, "CONFIG", "SET", "requirepass", "s3cret").Error()) // last: Do would need it
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		vars map[string]string
		code int
		msg  string
	}{
		{[]string{"list"}, map[string]string{"REDIS_ADDR": s.Addr}, 1, "refused the connection"},
		{[]string{"list"}, map[string]string{"REDIS_ADDR": s.Addr, "REDIS_PASSWORD": "wrong"}, 1, "refused the connection"},
		{[]string{"list"}, map[string]string{"REDIS_ADDR": s.Addr, "REDIS_PASSWORD": "s3cret"}, 0, ""},
		{[]string{"--user", "ops", "--password", "opspass", "list"}, map[string]string{"REDIS_ADDR": s.Addr}, 0, ""},
		{[]string{"list"}, map[string]string{"REDIS_ADDR": s.Addr, "REDIS_USER": "ops", "REDIS_PASSWORD": "opspass"}, 0, ""},
	} {
		var out, errb syncBuffer
		code := run(ctx, tc.args, func(k string) string { return tc.vars[k] }, &out, &errb)
		assert.Equal(t, tc.code, code, "%v %v: exit status", tc.args, tc.vars)
		assert.Contains(t, errb.String(), tc.msg, "%v %v: stderr", tc.args, tc.vars)
	}
}

// --tls-ca and --tls-server-name against a redis-server listening with TLS
// and a test-made CA: the command works with the CA, and fails (exit 1)
// without it or with a wrong server name.
func TestCLITLS(t *testing.T) {
	redistest.Require(t)
	s, tlsAddr, ca := redistest.StartTLS(t)
	ctx := context.Background()
	c, err := dsync.NewClient(s.Client(t), dsync.WithKeyPrefix("tls"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	lctx, err := c.NewMutex("secure").LockContext(ctx)
	require.NoError(t, err)
	defer c.NewMutex("secure").UnlockContext(lctx)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--addr", tlsAddr, "--tls-ca", ca, "--prefix", "tls", "inspect", "secure"}, 0, "mutex secure"},
		{[]string{"--addr", tlsAddr, "--tls-ca", ca, "--tls-server-name", "127.0.0.1", "--prefix", "tls", "list"}, 0, "secure"},
		{[]string{"--addr", tlsAddr, "--tls", "--timeout", "2s", "--prefix", "tls", "list"}, 1, "certificate"},
		{[]string{"--addr", tlsAddr, "--tls-ca", ca, "--tls-server-name", "elsewhere.example", "--timeout", "2s", "list"}, 1, "certificate"},
	} {
		var out, errb syncBuffer
		code := run(ctx, tc.args, func(string) string { return "" }, &out, &errb)
		text := out.String() + errb.String()
		assert.Equal(t, tc.code, code, "%v: exit status", tc.args)
		assert.Contains(t, text, tc.want, "%v: output", tc.args)
	}
}

// With keyspace notifications on the server, watch is woken by them: with
// an hour-long poll interval it still prints every change at once.
func TestCLIWatchKeyspace(t *testing.T) {
	redistest.Require(t)
	s := redistest.Start(t, "--notify-keyspace-events", "KA")
	c, err := dsync.NewClient(s.Client(t), dsync.WithKeyPrefix("ks"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--addr", s.Addr, "--prefix", "ks", "--interval", "1h", "watch", "w"}, func(string) string { return "" }, &out, &errb)
	}()
	waitFor(t, 5*time.Second, "the empty state", func() bool { return strings.Contains(out.String(), "(no lock named w)") })
	waitFor(t, 5*time.Second, "the keyspace subscription", func() bool {
		n, err := s.Do(t, "PUBSUB", "NUMPAT").AsInt64()
		return err == nil && n > 0
	})
	m := c.NewMutex("w")
	lctx, err := m.LockContext(ctx)
	require.NoError(t, err)
	waitFor(t, 2*time.Second, "the holder, woken by a notification", func() bool { return strings.Contains(out.String(), "holder  "+ownerOf(lctx)) })
	require.NoError(t, m.UnlockContext(lctx))
	waitFor(t, 2*time.Second, "the release, woken by a notification", func() bool { return strings.Contains(out.String(), "free (last fencing token") })
	cancel()
	code := <-done
	assert.Equal(t, 0, code, "watch ended with %d: %s", code, errb.String())
}

// top lists the locks with the most waiters first, with their holders and
// the age of the oldest hold.
func TestCLITop(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	// A FairMutex held with two waiters queued in Redis, and a free Mutex.
	held, err := c.NewFairMutex("busy").LockContext(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < 2; i++ {
		go c.NewFairMutex("busy").LockContext(wctx)
	}
	l, err := c.NewMutex("calm").LockContext(ctx)
	require.NoError(t, err)
	require.NoError(t, c.NewMutex("calm").UnlockContext(l))
	waitFor(t, 5*time.Second, "two queued waiters", func() bool {
		code, out, _ := e.run(ctx, "--json", "inspect", "busy")
		return code == 0 && strings.Count(out, `"owner"`) >= 3
	})
	tctx, stop := context.WithCancel(ctx)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(tctx, []string{"--prefix", e.prefix, "--interval", "1h", "top"}, func(k string) string { return e.vars[k] }, &out, &errb)
	}()
	waitFor(t, 5*time.Second, "a snapshot", func() bool { return strings.Contains(out.String(), "busy") })
	stop()
	code := <-done
	require.Equal(t, 0, code, "top exit %d: %s", code, errb.String())
	t.Logf("dsync top:\n%s", out.String())
	assert.NotContains(t, out.String(), "calm", "top lists an idle lock without --all")
	assert.NotContains(t, out.String(), "\x1b[", "top drew in place on a stream that is not a terminal")
	// --all lists it, after the busy one.
	var all syncBuffer
	actx, astop := context.WithCancel(ctx)
	adone := make(chan int, 1)
	go func() {
		adone <- run(actx, []string{"--prefix", e.prefix, "--interval", "1h", "--all", "top"}, func(k string) string { return e.vars[k] }, &all, &errb)
	}()
	waitFor(t, 5*time.Second, "a snapshot with --all", func() bool { return strings.Contains(all.String(), "calm") })
	astop()
	require.Equal(t, 0, <-adone, "top --all: %s", errb.String())
	assert.Less(t, strings.Index(all.String(), "busy"), strings.Index(all.String(), "calm"), "top --all:\n%s", all.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "top did not list the contended fair mutex first:\n%s", out.String())
	require.True(t, strings.HasPrefix(lines[2], "fair_mutex"), "top did not list the contended fair mutex first:\n%s", out.String())
	require.Contains(t, lines[2], "busy", "top did not list the contended fair mutex first:\n%s", out.String())
	if f := strings.Fields(lines[2]); assert.GreaterOrEqual(t, len(f), 5, "busy row %q: want 1 holder, 2 waiters and a hold age", lines[2]) {
		assert.Equal(t, "1", f[1], "busy row %q: holders", lines[2])
		assert.Equal(t, "2", f[2], "busy row %q: waiters", lines[2])
		assert.NotEqual(t, "-", f[3], "busy row %q: no hold age", lines[2])
	}
	cancel()
	require.NoError(t, c.NewFairMutex("busy").UnlockContext(held))
}

// rankTop: most waiters first, then the longest waited for (from the
// first refresh that saw waiters), then the most holders; idle locks only
// with all; a lock whose waiters are gone starts again.
func TestTopRank(t *testing.T) {
	t0 := time.Unix(1000, 0)
	since := map[[2]string]time.Time{}
	rows := func(r ...topRow) []topRow { return r }
	names := func(rs []topRow) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	// First refresh: "old" has waiters already.
	rankTop(rows(topRow{Kind: "mutex", Name: "old", Holders: 1, Waiters: 2}), since, t0, false)
	got := rankTop(rows(
		topRow{Kind: "mutex", Name: "idle"},
		topRow{Kind: "mutex", Name: "held", Holders: 1},
		topRow{Kind: "mutex", Name: "new", Holders: 1, Waiters: 2},
		topRow{Kind: "mutex", Name: "old", Holders: 1, Waiters: 2},
		topRow{Kind: "fair_mutex", Name: "most", Holders: 1, Waiters: 5},
	), since, t0.Add(3*time.Second), false)
	assert.Equal(t, []string{"most", "old", "new", "held"}, names(got), "ranked, idle hidden")
	assert.Equal(t, 3.0, got[1].Waiting, "old has had waiters for 3 s")
	assert.Equal(t, 0.0, got[2].Waiting, "new's waiters were first seen now")
	got = rankTop(rows(topRow{Kind: "mutex", Name: "idle"}, topRow{Kind: "mutex", Name: "old", Holders: 1}), since, t0.Add(4*time.Second), true)
	assert.Equal(t, []string{"old", "idle"}, names(got), "with all: idle listed, last")
	assert.NotContains(t, since, [2]string{"mutex", "old"}, "old's waiters are gone: forgotten")
}
