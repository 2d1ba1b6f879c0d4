package dsyncgoredis_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	dsyncgoredis "github.com/dsync/dsync/goredis"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// quiet drops go-redis's log lines (its sentinel client reports each
// master it finds).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// goRedis returns rdb, closed when t ends (after the Clients made on it).
func goRedis[R interface{ Close() error }](t *testing.T, rdb R) R {
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// dial is dsyncgoredis.Dial, its Client closed when t ends.
func dial(t *testing.T, rdb redis.UniversalClient, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	c, err := dsyncgoredis.Dial(ctxT(t), rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// reference returns a Client made without go-redis, by dsync.Dial of url,
// closed when t ends.
func reference(t *testing.T, url string, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	c, err := dsync.Dial(ctxT(t), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// lockShared takes the lock name through c and checks that ref, a Client
// on the Redis c should be on, finds it held (and free once c released
// it): c reached that Redis, and took a lock there.
func lockShared(t *testing.T, c, ref *dsync.Client, name string) {
	t.Helper()
	ctx := ctxT(t)
	m := c.NewMutex(name)
	lctx, err := m.LockContext(ctx)
	for n := 0; errors.Is(err, io.EOF) && n < 10; n++ {
		// A pooled connection the server closed fails its next call
		// (EOF), and the error says the call may be retried: after a
		// Sentinel failover, go-redis's connections to the old master
		// do, one call each (TestSentinel failed so once with both CPUs
		// busy). A user retries; so does the check.
		lctx, err = m.LockContext(ctx)
	}
	require.NoError(t, err)
	token, ok := dsync.FencingToken(lctx)
	require.True(t, ok)
	require.NotZero(t, token)
	other := ref.NewMutex(name)
	_, ok, err = other.TryLockContext(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the reference Client took %q while the go-redis Client held it: not the same Redis", name)
	require.NoError(t, m.UnlockContext(lctx))
	octx, ok, err := other.TryLockContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "%q still held after the go-redis Client released it", name)
	require.NoError(t, other.UnlockContext(octx))
}

// TestStandalone: a *redis.Client's address, user, password, database and
// client name reach the dsync Client, which takes a lock there.
func TestStandalone(t *testing.T) {
	s := redistest.Start(t)
	require.NoError(t, s.Do(t, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all").Error())

	t.Run("addr", func(t *testing.T) {
		rdb := goRedis(t, redis.NewClient(&redis.Options{Addr: s.Addr}))
		lockShared(t, dial(t, rdb), reference(t, s.Addr), "addr")
	})

	t.Run("user password db name", func(t *testing.T) {
		rdb := goRedis(t, redis.NewClient(&redis.Options{
			Addr: s.Addr, Username: "app", Password: "secret", DB: 5, ClientName: "gr-test",
		}))
		c := dial(t, rdb)
		lockShared(t, c, reference(t, "redis://"+s.Addr+"/5"), "db")
		// The database is 5's, not 0's: a Client on 0 takes the lock while c holds it.
		m := c.NewMutex("db0")
		lctx, err := m.LockContext(ctxT(t))
		require.NoError(t, err)
		on0 := reference(t, s.Addr).NewMutex("db0")
		octx, ok, err := on0.TryLockContext(ctxT(t))
		require.NoError(t, err)
		require.True(t, ok, "the lock was taken in database 0")
		require.NoError(t, on0.UnlockContext(octx))
		require.NoError(t, m.UnlockContext(lctx))
		// Its connections are the user's, on database 5, under the name.
		list, err := s.Do(t, "CLIENT", "LIST").ToString()
		require.NoError(t, err)
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name=gr-test ") {
				n++
				require.Contains(t, line, " db=5 ", line)
				require.Contains(t, line, " user=app ", line)
			}
		}
		require.Greater(t, n, 1, "no connection named gr-test besides go-redis's own:\n%s", list)
	})

	t.Run("wrong password", func(t *testing.T) {
		rdb := goRedis(t, redis.NewClient(&redis.Options{Addr: s.Addr, Username: "app", Password: "wrong"}))
		_, err := dsyncgoredis.Dial(ctxT(t), rdb)
		require.ErrorContains(t, err, "WRONGPASS")
	})

	// A provider wins over Username and Password (as in go-redis), and
	// is asked for each connection.
	providers := map[string]func(*redis.Options, *atomic.Int64){
		"CredentialsProvider": func(o *redis.Options, n *atomic.Int64) {
			o.CredentialsProvider = func() (string, string) { n.Add(1); return "app", "secret" }
		},
		"CredentialsProviderContext": func(o *redis.Options, n *atomic.Int64) {
			o.CredentialsProviderContext = func(ctx context.Context) (string, string, error) {
				n.Add(1)
				if _, ok := ctx.Deadline(); !ok {
					return "", "", errors.New("no deadline")
				}
				return "app", "secret", nil
			}
		},
		"StreamingCredentialsProvider": func(o *redis.Options, n *atomic.Int64) {
			o.StreamingCredentialsProvider = &streaming{n: n, t: t}
		},
	}
	for name, set := range providers {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			o := &redis.Options{Addr: s.Addr, Username: "app", Password: "wrong"}
			set(o, &calls)
			rdb := goRedis(t, redis.NewClient(o))
			c := dial(t, rdb)
			require.Positive(t, calls.Load(), "the provider was not asked")
			lockShared(t, c, reference(t, s.Addr), "provider")
		})
	}

	t.Run("unix", func(t *testing.T) {
		sock := t.TempDir() + "/redis.sock"
		u := redistest.Start(t, "--unixsocket", sock)
		rdb := goRedis(t, redis.NewClient(&redis.Options{Network: "unix", Addr: sock}))
		lockShared(t, dial(t, rdb), reference(t, u.Addr), "unix")
	})
}

// streaming is a StreamingCredentialsProvider that counts subscriptions
// and checks each is ended.
type streaming struct {
	n    *atomic.Int64
	t    *testing.T
	mu   sync.Mutex
	live int
}

func (s *streaming) Subscribe(auth.CredentialsListener) (auth.Credentials, auth.UnsubscribeFunc, error) {
	s.n.Add(1)
	s.mu.Lock()
	s.live++
	if s.live > 2 { // go-redis's own connection keeps one
		s.t.Errorf("%d subscriptions live: the Client's were not ended", s.live)
	}
	s.mu.Unlock()
	var once sync.Once
	return auth.NewBasicCredentials("app", "secret"), func() error {
		once.Do(func() { s.mu.Lock(); s.live--; s.mu.Unlock() })
		return nil
	}, nil
}

// TestOptions: the timeouts, protocol and name become rueidis's options.
func TestOptions(t *testing.T) {
	rdb := goRedis(t, redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1", DialTimeout: 1500 * time.Millisecond, ReadTimeout: 2 * time.Second,
		WriteTimeout: 3 * time.Second, Protocol: 2, ClientName: "n", DB: 3,
		TLSConfig: &tls.Config{ServerName: "x"},
	}))
	ro, err := dsyncgoredis.ClientOption(rdb)
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, ro.Dialer.Timeout)
	require.Equal(t, 3*time.Second, ro.ConnWriteTimeout)
	require.True(t, ro.AlwaysRESP2)
	require.True(t, ro.DisableCache)
	require.True(t, ro.ForceSingleClient)
	require.Equal(t, "n", ro.ClientName)
	require.Equal(t, 3, ro.SelectDB)
	require.Equal(t, []string{"127.0.0.1:1"}, ro.InitAddress)
	require.Equal(t, "x", ro.TLSConfig.ServerName)
	require.NotNil(t, ro.DialCtxFn)

	cl := goRedis(t, redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, ReadTimeout: 4 * time.Second, WriteTimeout: time.Second,
		DialTimeout: time.Second, Username: "u", Password: "p",
	}))
	ro, err = dsyncgoredis.ClientOption(cl)
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, ro.InitAddress)
	require.Equal(t, 4*time.Second, ro.ConnWriteTimeout)
	require.Equal(t, time.Second, ro.Dialer.Timeout)
	require.Equal(t, "u", ro.Username)
	require.Equal(t, "p", ro.Password)
	require.False(t, ro.ForceSingleClient)
	require.Nil(t, ro.DialCtxFn, "no Dialer: rueidis dials with TLSConfig")
}

// TestDialTimeout: against a server that accepts connections and never
// answers, Dial fails after go-redis's DialTimeout, well before its
// context ends; rueidis's own bound (5 s) would outlast the context.
func TestDialTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	conns.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	rdb := goRedis(t, redis.NewClient(&redis.Options{Addr: l.Addr().String(), DialTimeout: 100 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	_, err = dsyncgoredis.Dial(ctx, rdb)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Dial ended with its context, not the dial timeout: %v", err)
}

// TestTLS: the TLS configuration of the go-redis client is the Client's:
// with the test CA it connects, without it the server's certificate is
// refused.
func TestTLS(t *testing.T) {
	s, tlsAddr, caFile := redistest.StartTLS(t)
	pem, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))

	rdb := goRedis(t, redis.NewClient(&redis.Options{Addr: tlsAddr, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}))
	lockShared(t, dial(t, rdb), reference(t, s.Addr), "tls")

	rdb = goRedis(t, redis.NewClient(&redis.Options{Addr: tlsAddr, TLSConfig: &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}}))
	_, err = dsyncgoredis.Dial(ctxT(t), rdb)
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknown, "a CA the client does not trust: %v", err)
}

// TestCluster: a *redis.ClusterClient's seeds reach the 3+3 Redis Cluster;
// locks on every master work, and a Client dialled without go-redis sees
// them.
func TestCluster(t *testing.T) {
	redistest.Require(t)
	cl, err := redistest.StartCluster()
	require.NoError(t, err)
	t.Cleanup(cl.Stop)
	addrs := cl.Addrs()
	ref := reference(t, strings.Join(addrs, ","))
	for _, seeds := range [][]string{addrs[:1], addrs} {
		t.Run(fmt.Sprint(len(seeds), " seeds"), func(t *testing.T) {
			rdb := goRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds}))
			c := dial(t, rdb)
			masters := map[string]bool{}
			for i := 0; len(masters) < 3; i++ {
				require.Less(t, i, 1000, "no names on three masters")
				name := fmt.Sprint("c", i)
				m, _, err := cl.MasterOf(dsync.DefaultKeyPrefix + ":{" + name + "}:mutex")
				require.NoError(t, err)
				if masters[m.Addr] {
					continue
				}
				masters[m.Addr] = true
				lockShared(t, c, ref, name)
			}
		})
	}
}

// TestSentinel: a failover client (redis.NewFailoverClient) leads the
// Client to the master Sentinel names, and after a failover to the new
// one.
func TestSentinel(t *testing.T) {
	redistest.Require(t)
	st, err := redistest.StartSentinel()
	require.NoError(t, err)
	t.Cleanup(st.Stop)
	rdb := goRedis(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterSet, SentinelAddrs: st.Addrs()}))
	c := dial(t, rdb)
	lockShared(t, c, reference(t, st.Master.Addr), "before")

	next, err := st.Failover(30 * time.Second)
	require.NoError(t, err)
	require.Equal(t, st.Replica, next)
	// Sentinel turns the old master into a replica after it promoted the
	// new one; until then, both take writes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		role, err := redistest.Role(st.Master)
		if err == nil && role == "slave" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the old master is still %q (%v)", role, err)
		time.Sleep(20 * time.Millisecond)
	}
	// Sentinel closes the connections of the old master as it turns it
	// into a replica; the Client connects again, through Sentinel, to the
	// new master. Lock retries until it holds the lock.
	ref := reference(t, next.Addr)
	m := c.NewMutex("after")
	m.Lock()
	_, ok, err := ref.NewMutex("after").TryLockContext(ctxT(t))
	require.NoError(t, err)
	require.False(t, ok, "the lock taken after the failover is not on the new master")
	m.Unlock()
	lockShared(t, c, ref, "after2")
}

// TestUnsupported: a Ring, a failover cluster client and nil are refused
// with ErrInvalidArgument, saying why.
func TestUnsupported(t *testing.T) {
	for _, tc := range []struct {
		rdb  redis.UniversalClient
		says string
	}{
		{goRedis(t, redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})), "Ring"},
		{goRedis(t, redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})), "ClusterSlots"},
		{(*redis.Client)(nil), "*redis.Client"},
		{nil, "<nil>"},
	} {
		_, err := dsyncgoredis.Dial(context.Background(), tc.rdb)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		require.ErrorContains(t, err, tc.says)
		_, err = dsyncgoredis.ClientOption(tc.rdb)
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	}
}
