package faults

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The commands a Mutex needs: the connection handshake, the scripts (and
// what they call: MGET reads the lock with the undo mark of a call-made
// owner, EXISTS checks an attempt's, DEL drops a caller-supplied owner's
// attempt marker, HGETALL/HSET/HDEL keep the waiting count, and
// RPUSH/LPOP/LREM/HGET/HKEYS the queue of the one-hop grant), and pub/sub
// for wakeups.
const dsyncCommands = "+@connection +client +evalsha +eval +script|load +get +set +mget +exists +del +pexpire +pexpireat +pttl +time +hgetall +hset +hdel +hget +hkeys +rpush +lpop +lrem +publish +subscribe +unsubscribe"

// Security: a user restricted to the prefix's keys and channels runs the
// Mutex (acquire, renewal, contention with wakeups, release); a user
// without access to them gets a clear error naming the lock and NOPERM.
func TestFaultSecurityACL(t *testing.T) {
	srv := startRedis(t)
	for _, u := range []string{
		"ACL SETUSER locker on >lockpw resetkeys ~dsync:* resetchannels &dsync:* -@all " + dsyncCommands,
		"ACL SETUSER outsider on >outpw resetkeys ~other:* resetchannels &other:* -@all " + dsyncCommands,
	} {
		require.NoError(t, srv.do(t, strings.Fields(u)...).Error(), "%s", u)
	}
	as := func(user, pw string) func(*rueidis.ClientOption) {
		return func(o *rueidis.ClientOption) { o.Username, o.Password = user, pw }
	}
	const lease = time.Second
	c1 := newDsync(t, srv.Addr, "dsync", lease, as("locker", "lockpw"))
	c2 := newDsync(t, srv.Addr, "dsync", lease, as("locker", "lockpw"))
	m1, m2 := c1.NewMutex("acl"), c2.NewMutex("acl")
	l1, err := m1.LockContext(context.Background())
	require.NoError(t, err, "restricted user cannot lock")
	got := make(chan error, 1)
	go func() {
		l2, err := m2.LockContext(context.Background())
		if err == nil {
			err = m2.UnlockContext(l2)
		}
		got <- err
	}()
	time.Sleep(lease + lease/5) // hold across renewals while the other waits
	require.NoError(t, l1.Err(), "restricted user's hold was lost: %v", context.Cause(l1))
	require.NoError(t, m1.UnlockContext(l1))
	select {
	case err := <-got:
		require.NoError(t, err, "restricted user's waiter")
	case <-time.After(5 * time.Second):
		t.Fatal("restricted user's waiter was never woken")
	}
	c3 := newDsync(t, srv.Addr, "dsync", lease, as("outsider", "outpw"))
	_, err = c3.NewMutex("acl").LockContext(context.Background())
	t.Logf("(j) ACL ~dsync:* &dsync:*: lock, renewal, wakeup and release work; a user without access gets: %v", err)
	if assert.Error(t, err, "outsider's LockContext; want an error naming the lock and NOPERM") {
		assert.Contains(t, err.Error(), "NOPERM", "outsider's LockContext")
		assert.Contains(t, err.Error(), `"acl"`, "outsider's LockContext: the error does not name the lock")
	}
	assert.NotErrorIs(t, err, dsync.ErrNotHeld, "outsider's error is misleading")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "outsider's error is misleading")
}

// Security: the client talks to redis-server over TLS only, with
// certificates the test makes.
func TestFaultSecurityTLS(t *testing.T) {
	dir := t.TempDir()
	pool := redistest.WriteCerts(t, dir)
	port := freePort(t)
	s := &redisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, args: []string{
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", filepath.Join(dir, "server.crt"),
		"--tls-key-file", filepath.Join(dir, "server.key"), "--tls-ca-cert-file", filepath.Join(dir, "ca.crt"),
		"--tls-auth-clients", "no",
	}}
	if err := s.start(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server did not start with TLS (Debian's is built with it): %v", err)
		}
		t.Skipf("redis-server without TLS support: %v", err)
	}
	t.Cleanup(s.kill)
	withTLS := func(o *rueidis.ClientOption) {
		o.TLSConfig = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	c := newDsync(t, s.Addr, "dsync", time.Second, withTLS)
	m := c.NewMutex("tls")
	l, err := m.LockContext(context.Background())
	require.NoError(t, err, "lock over TLS")
	_, ok, err := newDsync(t, s.Addr, "dsync", time.Second, withTLS).NewMutex("tls").TryLockContext(context.Background())
	require.False(t, ok, "second owner over TLS")
	require.NoError(t, err, "second owner over TLS")
	require.NoError(t, m.UnlockContext(l))
	// Plain text is refused by the TLS port.
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write([]byte("PING\r\n"))
		buf := make([]byte, 7)
		n, _ := conn.Read(buf)
		conn.Close()
		assert.NotEqual(t, "+PONG\r\n", string(buf[:n]), "the TLS port answered plain text")
	}
	t.Logf("(j) TLS: lock, contention and release over --tls-port with test-made certificates")
}

// Security: owner IDs are 128 random bits, and no other owner, guessed or
// known, can release or renew a hold (only its own owner's Unlock frees it).
func TestFaultSecurityGuessedOwner(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	c := newDsync(t, srv.Addr, prefix, time.Second)
	m := c.NewMutex("g")
	l, err := m.LockContext(context.Background())
	require.NoError(t, err)
	// An owner is "<client name>/<128 random bits in hex>": the name says
	// who made it, the random part is what no one can guess.
	owner, _ := dsync.OwnerOf(l)
	slash := strings.LastIndexByte(owner, '/')
	b, err := hex.DecodeString(owner[slash+1:])
	require.NoError(t, err, "owner %q does not end in 128 bits of hex", owner)
	require.Len(t, b, 16, "owner %q does not end in 128 bits of hex", owner)
	attacker := newDsync(t, srv.Addr, prefix, time.Second).NewMutex("g")
	seen := map[string]bool{owner: true}
	const guesses = 2000
	for range guesses {
		g := dsync.WithOwner(context.Background())
		id, _ := dsync.OwnerOf(g)
		require.False(t, seen[id], "owner ID %s repeated", id)
		seen[id] = true
		require.ErrorIs(t, attacker.UnlockContext(g), dsync.ErrNotHeld, "Unlock by a guessed owner")
	}
	// A client that bypasses the API and runs dsync's own release and
	// renew scripts with near misses of the real owner gets nothing.
	// The scripts as dsync sends them (lib.lua composed in).
	rel, ren := scripts.Source(scripts.MutexRelease), scripts.Source(scripts.MutexRenew)
	key := prefix + ":{g}:mutex"
	tok := strconv.FormatUint(tokenOf(l), 10)
	last := len(owner) - 1
	for _, g := range []string{owner[:last] + flip(owner[last]), owner[:slash+17], owner[slash+1:], owner + " ", "-", "", ".*"} {
		n, err := srv.do(t, "EVAL", rel, "1", key, g+" "+tok+" ").AsInt64()
		require.NoError(t, err, "release script as owner %q", g)
		require.Equal(t, int64(0), n, "release script as owner %q", g)
		n, err = srv.do(t, "EVAL", rel, "1", key, g).AsInt64()
		require.NoError(t, err, "release script as owner %q, any token", g)
		require.Equal(t, int64(0), n, "release script as owner %q, any token", g)
		n, err = srv.do(t, "EVAL", ren, "1", key, g+" "+tok+" ", "100000").AsInt64()
		require.NoError(t, err, "renew script as owner %q", g)
		require.Equal(t, int64(0), n, "renew script as owner %q", g)
	}
	_, ok, _ := attacker.TryLockContext(context.Background())
	require.False(t, ok, "the hold did not survive the guesses")
	require.NoError(t, l.Err(), "the hold did not survive the guesses")
	require.NoError(t, m.UnlockContext(l), "the real owner's Unlock")
	t.Logf("(j) owner IDs 128-bit random: %d guessed owners got ErrNotHeld, 6 near misses running the release/renew scripts directly got 0; the hold survived", guesses)
}

func flip(b byte) string {
	if b == '0' {
		return "1"
	}
	return "0"
}
