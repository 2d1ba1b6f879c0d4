// Package dsyncgoredis opens a dsync Client on the Redis a go-redis client
// talks to, with that client's connection settings, so that a service
// configured for go-redis need not spell them again:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", Password: pw, DB: 2})
//	c, err := dsyncgoredis.Dial(ctx, rdb)   // same server, password and database
//	if err != nil { ... }
//	defer c.Close()
//	m := c.NewMutex("orders")
//
// dsync speaks to Redis through rueidis, so the Client has connections of
// its own, made with what rdb's options say: its addresses, credentials,
// database, TLS configuration and timeouts. It lives in the folder goredis/,
// a module of its own, so that programs that import only dsync do not get
// go-redis in their module graph.
package dsyncgoredis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
	"github.com/redis/rueidis"
)

// Dial returns a dsync Client on the Redis deployment rdb talks to, with
// rdb's connection settings (see ClientOption). rdb may be a *redis.Client
// (one server, or a failover client from redis.NewFailoverClient, which
// finds the master through Sentinel) or a *redis.ClusterClient; a
// *redis.Ring, a cluster client with its own ClusterSlots (such as
// redis.NewFailoverClusterClient's) and other types return an error that
// errors.Is dsync.ErrInvalidArgument.
//
// The Client makes its own connections and closes them on Close; rdb stays
// open, and must stay open as long as the Client (a failover client asks
// rdb's sentinels for the master whenever the Client connects). ctx and
// opts are as for dsync.Dial; a dsync.WithDialOption among opts sees the
// options ClientOption made, and may change them.
func Dial(ctx context.Context, rdb redis.UniversalClient, opts ...dsync.Option) (*dsync.Client, error) {
	ro, target, err := clientOption(rdb)
	if err != nil {
		return nil, err
	}
	set := dsync.WithDialOption(func(o *rueidis.ClientOption) { *o = ro })
	return dsync.Dial(ctx, target, append([]dsync.Option{set}, opts...)...)
}

// ClientOption returns the rueidis options that connect where rdb
// connects, for a caller that makes its own rueidis client (and passes it
// to dsync.NewClient). It reads rdb's options as rdb uses them:
//
//   - A *redis.Client connects through rdb's Dialer, the one rdb itself
//     uses (Options.Dialer, or go-redis's default, which dials Network and
//     Addr within DialTimeout with TLSConfig; a failover client's finds the
//     current master through Sentinel), to that one server
//     (ForceSingleClient), and selects DB.
//   - A *redis.ClusterClient starts from Addrs and dials with TLSConfig
//     within DialTimeout, or through its Dialer when it has one.
//   - Credentials: a StreamingCredentialsProvider, else
//     CredentialsProviderContext, else CredentialsProvider is asked for each
//     new connection, as go-redis asks it; else Username and Password.
//   - ReadTimeout and WriteTimeout: the larger, when positive, is
//     rueidis's ConnWriteTimeout, how long a connection may go without an
//     answer before it is closed (rueidis has no deadline per read);
//     DialTimeout bounds each connection's handshake too.
//   - Protocol 2 keeps rueidis on RESP2 (AlwaysRESP2); ClientName names the
//     connections (CLIENT SETNAME).
//
// Client-side caching is off, as dsync.Dial sets it. Not carried over:
// OnConnect (it takes a go-redis connection), pool sizes and retry
// settings (dsync's calls have their own: see dsync.Dial), and a
// ClusterClient's NewClient hook.
func ClientOption(rdb redis.UniversalClient) (rueidis.ClientOption, error) {
	ro, _, err := clientOption(rdb)
	return ro, err
}

// clientOption returns rdb's rueidis options and the address dsync.Dial is
// given for them (it names the connection in Dial's errors).
func clientOption(rdb redis.UniversalClient) (rueidis.ClientOption, string, error) {
	switch r := rdb.(type) {
	case *redis.Client:
		if r == nil {
			break
		}
		return single(r.Options())
	case *redis.ClusterClient:
		if r == nil {
			break
		}
		return cluster(r.Options())
	case *redis.Ring:
		return rueidis.ClientOption{}, "", fmt.Errorf("%w: dsyncgoredis: a *redis.Ring spreads keys over servers that do not know each other, and a lock's keys, scripts and wakeups must meet on one: open a Client per shard, or a dsync RedLock over the shards", dsync.ErrInvalidArgument)
	}
	return rueidis.ClientOption{}, "", fmt.Errorf("%w: dsyncgoredis: Dial takes a *redis.Client or *redis.ClusterClient, not %T", dsync.ErrInvalidArgument, rdb)
}

// single reads the options of a *redis.Client, standalone or failover.
func single(o *redis.Options) (rueidis.ClientOption, string, error) {
	ro := base(o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.Protocol, o.ClientName)
	ro.InitAddress = []string{o.Addr}
	ro.ForceSingleClient = true // rdb talks to this one server, as go-redis does
	ro.SelectDB = o.DB
	ro.TLSConfig = o.TLSConfig // for the record: rdb's Dialer does the handshake
	dial, network, addr := o.Dialer, o.Network, o.Addr
	if dial == nil { // o not initialised by redis.NewClient: its default
		dial = redis.NewDialer(o)
	}
	if network == "" {
		network = "tcp"
	}
	// go-redis passes its Dialer the Network and Addr of its options (a
	// failover client's ignores them and asks Sentinel), whatever address
	// rueidis dials.
	ro.DialCtxFn = func(ctx context.Context, _ string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return dial(ctx, network, addr)
	}
	credentials(&ro, o.StreamingCredentialsProvider, o.CredentialsProviderContext, o.CredentialsProvider, o.Username, o.Password)
	target := o.Addr
	if network == "unix" {
		target = "unix://" + o.Addr
	}
	return ro, target, nil
}

// cluster reads the options of a *redis.ClusterClient.
func cluster(o *redis.ClusterOptions) (rueidis.ClientOption, string, error) {
	if o.ClusterSlots != nil {
		return rueidis.ClientOption{}, "", fmt.Errorf("%w: dsyncgoredis: a *redis.ClusterClient with ClusterSlots (redis.NewFailoverClusterClient, or slots of your own) has no Redis Cluster to discover: for Sentinel, pass redis.NewFailoverClient's client", dsync.ErrInvalidArgument)
	}
	if len(o.Addrs) == 0 {
		return rueidis.ClientOption{}, "", fmt.Errorf("%w: dsyncgoredis: the *redis.ClusterClient has no Addrs", dsync.ErrInvalidArgument)
	}
	ro := base(o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.Protocol, o.ClientName)
	ro.InitAddress = append([]string(nil), o.Addrs...)
	ro.TLSConfig = o.TLSConfig
	if dial := o.Dialer; dial != nil {
		ro.DialCtxFn = func(ctx context.Context, dst string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, "tcp", dst)
		}
	}
	credentials(&ro, o.StreamingCredentialsProvider, o.CredentialsProviderContext, o.CredentialsProvider, o.Username, o.Password)
	target := o.Addrs[0]
	for _, a := range o.Addrs[1:] {
		target += "," + a
	}
	return ro, target, nil
}

// base returns the options every kind of client shares.
func base(dialTimeout, read, write time.Duration, protocol int, name string) rueidis.ClientOption {
	ro := rueidis.ClientOption{DisableCache: true, ClientName: name, AlwaysRESP2: protocol == 2}
	if dialTimeout > 0 {
		ro.Dialer.Timeout = dialTimeout
	}
	if t := max(read, write); t > 0 {
		ro.ConnWriteTimeout = t
	}
	return ro
}

// credentials sets ro's credentials from go-redis's, in go-redis's order:
// a streaming provider, a provider with a context, a provider, the
// username and password.
func credentials(ro *rueidis.ClientOption, streaming auth.StreamingCredentialsProvider,
	withCtx func(context.Context) (string, string, error), provider func() (string, string),
	username, password string) {
	bound := ro.Dialer.Timeout
	if bound <= 0 {
		bound = rueidis.DefaultDialTimeout
	}
	switch {
	case streaming != nil:
		// The credentials of the moment, for each new connection: rueidis
		// does not re-authenticate a connection when they change.
		ro.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			creds, unsubscribe, err := streaming.Subscribe(ignore{})
			if err != nil {
				return rueidis.AuthCredentials{}, fmt.Errorf("dsyncgoredis: streaming credentials: %w", err)
			}
			if unsubscribe != nil {
				_ = unsubscribe()
			}
			u, p := creds.BasicAuth()
			return rueidis.AuthCredentials{Username: u, Password: p}, nil
		}
	case withCtx != nil:
		ro.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			u, p, err := withCtx(ctx)
			if err != nil {
				return rueidis.AuthCredentials{}, fmt.Errorf("dsyncgoredis: credentials: %w", err)
			}
			return rueidis.AuthCredentials{Username: u, Password: p}, nil
		}
	case provider != nil:
		ro.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			u, p := provider()
			return rueidis.AuthCredentials{Username: u, Password: p}, nil
		}
	default:
		ro.Username, ro.Password = username, password
	}
}

// ignore is the listener of a streaming subscription kept for one read.
type ignore struct{}

func (ignore) OnNext(auth.Credentials) {}
func (ignore) OnError(error)           {}
