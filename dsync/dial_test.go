package dsync_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// TestDialURLs: what Dial makes of each spelling of an address, and the
// errors that name what is wrong in one (without the password).
func TestDialURLs(t *testing.T) {
	for _, tc := range []struct {
		url      string
		addrs    []string
		master   string
		db       int
		tls      bool
		user, pw string
	}{
		{url: "127.0.0.1:6380", addrs: []string{"127.0.0.1:6380"}},
		{url: " redis-host ", addrs: []string{"redis-host:6379"}},
		{url: "10.0.0.1:7000,10.0.0.2:7001, 10.0.0.3", addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:6379"}},
		{url: "[::1]:7000,::1", addrs: []string{"[::1]:7000", "[::1]:6379"}},
		{url: "redis://127.0.0.1:6380/2", addrs: []string{"127.0.0.1:6380"}, db: 2},
		{url: "redis://:secret@cache:6380", addrs: []string{"cache:6380"}, pw: "secret"},
		{url: "rediss://app:secret@cache.example.com", addrs: []string{"cache.example.com:6379"}, tls: true, user: "app", pw: "secret"},
		{url: "redis://h1:7000?addr=h2:7001&addr=h3", addrs: []string{"h1:7000", "h2:7001", "h3:6379"}},
		{url: "redis://u:p@h1:7000,h2:7001,h3/0?dial_timeout=3s", addrs: []string{"h1:7000", "h2:7001", "h3:6379"}, user: "u", pw: "p"},
		{url: "redis://s1:26379?addr=s2:26379&master_set=mymaster", addrs: []string{"s1:26379", "s2:26379"}, master: "mymaster"},
		{url: "redis-sentinel://s1,s2:26380,s3/3#mymaster", addrs: []string{"s1:26379", "s2:26380", "s3:26379"}, master: "mymaster", db: 3},
		{url: "redis-sentinel://:pw@s1:26379/mymaster/1", addrs: []string{"s1:26379"}, master: "mymaster", db: 1, pw: "pw"},
		{url: "redis+sentinel://s1?master_set=m", addrs: []string{"s1:26379"}, master: "m"},
		{url: "rediss-sentinel://s1:26379#m", addrs: []string{"s1:26379"}, master: "m", tls: true},
		{url: "unix:///run/redis.sock?db=4", addrs: []string{"/run/redis.sock"}, db: 4},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := dsync.ParseDialURL(tc.url)
			require.NoError(t, err)
			require.Equal(t, tc.addrs, o.InitAddress)
			require.Equal(t, tc.master, o.Sentinel.MasterSet)
			require.Equal(t, tc.db, o.SelectDB)
			require.Equal(t, tc.tls, o.TLSConfig != nil)
			if tc.master != "" {
				require.Equal(t, tc.tls, o.Sentinel.TLSConfig != nil, "TLS to the sentinels too")
			}
			require.Equal(t, tc.user, o.Username)
			require.Equal(t, tc.pw, o.Password)
		})
	}

	for _, tc := range []struct{ url, says string }{
		{"", "needs an address"},
		{"http://cache:6379", `unknown scheme "http"`},
		{"redis://:hunter2@cache:port", "invalid port"},
		{"redis://:hunter2@cache:6379/x", "invalid database number"},
		{"redis://:hunter2@cache:6379?dial_timeout=3", "invalid dial timeout"},
		{"redis-sentinel://:hunter2@s1:26379", "no master name: add it as #mymaster"},
		{"redis-sentinel://s1/a/b/c", "want /<db>, /<master> or /<master>/<db>"},
		{"redis://h1,,h2", "empty host"},
		{"h1:6379,h2:notaport", `bad port "notaport"`},
	} {
		t.Run("bad "+tc.url, func(t *testing.T) {
			_, err := dsync.ParseDialURL(tc.url)
			require.ErrorIs(t, err, dsync.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			_, err = dsync.Dial(context.Background(), tc.url)
			require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		})
	}
}

// dialT dials url for t with a prefix of its own; the Client is closed
// when t ends.
func dialT(t *testing.T, url string, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	opts = append([]dsync.Option{dsync.WithKeyPrefix(testPrefix(t))}, opts...)
	c, err := dsync.Dial(ctxT(t), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// lockOnce takes and releases a Mutex through c.
func lockOnce(t *testing.T, c *dsync.Client) {
	t.Helper()
	m := c.NewMutex("dial")
	lctx, err := m.LockContext(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(lctx))
}

// TestDialStandalone: Dial by address and by URL gives a working Client
// whose Close closes the connection Dial made (and NewClient's stays open).
func TestDialStandalone(t *testing.T) {
	addr := server(t).Addr
	for _, url := range []string{addr, "redis://" + addr + "/0", "redis://" + addr + "?protocol=2"} {
		t.Run(url, func(t *testing.T) {
			c := dialT(t, url)
			lockOnce(t, c)
			rc := dsync.Owned(c)
			require.Equal(t, rueidis.ClientModeStandalone, rc.Mode())
			require.NoError(t, c.Close())
			require.ErrorIs(t, pingAfterClose(rc), rueidis.ErrClosing, "Close closes the rueidis client Dial made")
		})
	}
	t.Run("unix", func(t *testing.T) {
		sock := t.TempDir() + "/redis.sock"
		redistest.Start(t, "--unixsocket", sock)
		lockOnce(t, dialT(t, "unix://"+sock))
	})
	t.Run("NewClient", func(t *testing.T) {
		rc := newRueidis(t)
		c, err := dsync.NewClient(rc)
		require.NoError(t, err)
		require.Nil(t, dsync.Owned(c))
		require.NoError(t, c.Close())
		require.NoError(t, rc.Do(context.Background(), rc.B().Ping().Build()).Error(), "a caller's rueidis client stays open")
	})
	t.Run("bad option", func(t *testing.T) {
		_, err := dsync.Dial(ctxT(t), addr, dsync.WithKeyPrefix("{x}"))
		require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	})
	t.Run("WithDialOption", func(t *testing.T) {
		c := dialT(t, addr, dsync.WithDialOption(func(o *rueidis.ClientOption) { o.ClientName = "dial-test" }))
		rc := dsync.Owned(c)
		name, err := rc.Do(context.Background(), rc.B().ClientGetname().Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "dial-test", name)
	})
}

// TestDialCluster: several addresses, or addr= parameters, reach a Redis
// Cluster.
func TestDialCluster(t *testing.T) {
	addrs := cluster(t).Addrs()
	for _, url := range []string{
		strings.Join(addrs, ","),
		"redis://" + addrs[0] + "?addr=" + addrs[1],
		"redis://" + addrs[0], // one seed: rueidis asks the server
	} {
		t.Run(url, func(t *testing.T) {
			c := dialT(t, url)
			require.Equal(t, rueidis.ClientModeCluster, dsync.Owned(c).Mode())
			lockOnce(t, c)
		})
	}
}

// TestDialSentinel: a redis-sentinel URL finds the master through the
// sentinels.
func TestDialSentinel(t *testing.T) {
	st := sentinel(t)
	for _, url := range []string{
		"redis-sentinel://" + strings.Join(st.Addrs(), ",") + "#" + redistest.MasterSet,
		"redis://" + st.Addrs()[0] + "?master_set=" + redistest.MasterSet,
	} {
		t.Run(url, func(t *testing.T) {
			c := dialT(t, url)
			require.Equal(t, rueidis.ClientModeSentinel, dsync.Owned(c).Mode())
			lockOnce(t, c)
		})
	}
}

// TestDialBoundedByContext: against a server that accepts connections and
// never answers, Dial returns when its context ends, not after rueidis's
// 5 s handshake timeout; and a refused connection is an error at once.
func TestDialBoundedByContext(t *testing.T) {
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

	const wait = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err = dsync.Dial(ctx, l.Addr().String())
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "dsync: dial "+l.Addr().String())
	require.Less(t, took, wait+time.Second, "Dial outlasted its context")

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(wait, cancel)
	_, err = dsync.Dial(ctx, "redis://"+l.Addr().String())
	require.ErrorIs(t, err, context.Canceled)

	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := free.Addr().String()
	free.Close()
	_, err = dsync.Dial(context.Background(), addr)
	require.Error(t, err)
	require.False(t, errors.Is(err, dsync.ErrInvalidArgument), "a refused connection is not a bad argument: %v", err)
}

// pingAfterClose is a PING's error on rc, closed: ErrClosing, once a dial
// that was on its way as rc closed has ended. Such a dial fails with its
// context cancelled ("operation was canceled"), and a call that waited
// for it gets that error instead (seen once in a make test of 6799bbf,
// for the redis://.../0 URL): the PING is sent again then, for at most 5
// s.
func pingAfterClose(rc rueidis.Client) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := rc.Do(context.Background(), rc.B().Ping().Build()).Error()
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || !errors.Is(err, context.Canceled) || time.Now().After(deadline) {
			return err
		}
	}
}
