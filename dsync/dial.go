package dsync

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Dial connects to Redis and returns a Client whose Close closes the
// connection. url is one of
//
//	127.0.0.1:6379                      one server (port 6379 if left out)
//	10.0.0.1:7000,10.0.0.2:7000         the seeds of a Redis Cluster
//	redis://user:pass@host:6379/0       one server; rediss:// for TLS, unix:///path/to/sock
//	redis://h1:7000?addr=h2:7000        a cluster
//	redis-sentinel://s1:26379,s2:26379/0#mymaster
//	                                    through Sentinel (rediss-sentinel:// for TLS)
//
// URLs are read by rueidis.ParseURL. ctx bounds the connection: Dial returns
// an error matching ctx.Err() when ctx ends first. A bad address or URL
// returns ErrInvalidArgument, naming what is wrong; errors never show the
// password, which may hold any character: the credentials end at the
// URL's last '@' (write a '@' in the query as %40).
func Dial(ctx context.Context, url string, opts ...Option) (*Client, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: Dial needs a context: pass context.Background() or one with a deadline", ErrInvalidArgument)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ro, err := parseDialURL(url)
	if err != nil {
		return nil, err
	}
	ro.DisableCache = true
	for _, f := range cfg.dial {
		f(&ro)
	}
	b := &dialBound{ctx: ctx}
	ro.DialCtxFn = b.wrap(ro)
	rc, err := rueidis.NewClient(ro)
	b.done()
	if err == nil && ctx.Err() != nil {
		rc.Close()
		err = ctx.Err()
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return nil, fmt.Errorf("dsync: dial %s: %w (%v)", redactURL(url), cerr, err)
		}
		return nil, fmt.Errorf("dsync: dial %s: %w", redactURL(url), err)
	}
	c, err := NewClient(rc, opts...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	c.owned = rc
	return c, nil
}

// WithDialOption lets f change the rueidis options Dial builds from its URL
// (a TLS configuration, timeouts) before it connects. NewClient ignores it.
func WithDialOption(f func(*rueidis.ClientOption)) Option {
	return func(c *config) {
		if f != nil {
			c.dial = append(c.dial, f)
		}
	}
}

// sentinelPort is where sentinels listen unless a redis-sentinel URL says.
const sentinelPort = "26379"

// parseDialURL turns Dial's argument into rueidis options.
//
// The credentials are cut off first, at the last '@' (a password may hold
// any character, '/', '?', '#' and '@' included; a '@' in the query or the
// fragment must be escaped as %40), so that no parser sees them and no
// error can show them: errors print the address as redactURL does.
func parseDialURL(raw string) (rueidis.ClientOption, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Dial needs an address: pass host:port or a URL such as redis://127.0.0.1:6379", ErrInvalidArgument)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		if strings.Contains(s, "@") {
			return rueidis.ClientOption{}, fmt.Errorf("%w: Dial address %s: credentials need a URL: redis://USER:PASSWORD@host:port", ErrInvalidArgument, redactURL(s))
		}
		addrs, err := splitHosts(s, "6379")
		if err != nil {
			return rueidis.ClientOption{}, fmt.Errorf("%w: Dial address %q: %v", ErrInvalidArgument, s, err)
		}
		return rueidis.ClientOption{InitAddress: addrs}, nil
	}
	bad := func(format string, a ...any) (rueidis.ClientOption, error) {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Dial URL %s: "+format, append([]any{ErrInvalidArgument, redactURL(s)}, a...)...)
	}
	var user, pass string
	hasUser := false
	if creds, after, ok := cutCreds(rest); ok {
		rest, hasUser = after, true
		u, p, _ := strings.Cut(creds, ":")
		var err error
		if user, err = url.PathUnescape(u); err != nil {
			return bad("the user name has a bad %%-escape")
		}
		if pass, err = url.PathUnescape(p); err != nil {
			return bad("the password has a bad %%-escape (write %%25 for a %%)")
		}
	}
	// The authority may list several hosts (h1:p1,h2:p2), which net/url
	// does not read: keep the first in the URL and the others apart.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	hosts := rest[:end]
	first, others, _ := strings.Cut(hosts, ",")
	u, err := url.Parse(scheme + "://" + first + rest[end:])
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL
		}
		return bad("%v", err)
	}
	if p := u.Port(); p != "" {
		if err := checkPort(p); err != nil {
			return bad("host %q: %v", first, err)
		}
	}
	sentinel, port := false, "6379"
	switch strings.ToLower(u.Scheme) {
	case "redis-sentinel", "rediss-sentinel", "redis+sentinel", "rediss+sentinel":
		sentinel, port = true, sentinelPort
	case "unix":
		if strings.TrimSpace(u.Path) == "" {
			return bad("no socket path: write unix:///path/to/redis.sock")
		}
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return bad("unknown scheme %q: use redis://, rediss://, redis-sentinel://, rediss-sentinel://, unix:// or host:port", u.Scheme)
	}
	// The other hosts, and addr= parameters (rueidis and go-redis spell a
	// cluster's seeds so), get their port here: rueidis would give an
	// addr= without one the first host's name.
	q := u.Query()
	var extra []string
	for _, list := range append([]string{others}, q["addr"]...) {
		if list == "" {
			continue
		}
		addrs, err := splitHosts(list, port)
		if err != nil {
			return bad("%v", err)
		}
		extra = append(extra, addrs...)
	}
	q.Del("addr")
	var o rueidis.ClientOption
	if sentinel {
		o, err = sentinelURL(s, u, q, extra)
	} else {
		for _, a := range extra {
			q.Add("addr", a)
		}
		u.RawQuery = q.Encode()
		o, err = rueidis.ParseURL(u.String())
		if err != nil {
			err = fmt.Errorf("%w: Dial URL %s: %v", ErrInvalidArgument, redactURL(s), err)
		}
	}
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	if hasUser {
		o.Username, o.Password = user, pass
	}
	return o, nil
}

// cutCreds cuts the credentials "user[:password]" off s, the part of a URL
// after "scheme://" (or a scheme-less address): everything before its last
// '@'.
func cutCreds(s string) (creds, rest string, ok bool) {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return "", s, false
	}
	return s[:at], s[at+1:], true
}

// checkPort checks a port number: 1 to 65535.
func checkPort(p string) error {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("bad port %q: want 1 to 65535", p)
	}
	return nil
}

// sentinelURL reads redis-sentinel://[user:pass@]s1[:port][,s2[:port]...][/master][/db][?query][#master],
// the spelling of Lettuce (master in the fragment) and of redis-py's
// sentinel URLs (master in the path), through rueidis.ParseURL.
func sentinelURL(raw string, u *url.URL, q url.Values, extra []string) (rueidis.ClientOption, error) {
	bad := func(format string, a ...any) (rueidis.ClientOption, error) {
		return rueidis.ClientOption{}, fmt.Errorf("%w: Dial URL %s: "+format, append([]any{ErrInvalidArgument, redactURL(raw)}, a...)...)
	}
	master, db := u.Fragment, ""
	for _, p := range strings.Split(strings.Trim(u.Path, "/"), "/") {
		switch _, err := strconv.Atoi(p); {
		case p == "":
		case err == nil && db == "":
			db = p
		case err != nil && master == "" && db == "":
			master = p
		case err != nil && p == master && db == "":
		default:
			return bad("path %q: want /<db>, /<master> or /<master>/<db>", u.Path)
		}
	}
	for _, k := range []string{"master_set", "master_name", "sentinelMasterId"} {
		if m := q.Get(k); m != "" && master == "" {
			master = m
		}
		q.Del(k)
	}
	if master == "" {
		return bad("no master name: add it as #mymaster (or ?master_set=mymaster)")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(orLocalhost(u.Hostname()), sentinelPort)
	}
	for _, a := range extra {
		q.Add("addr", a)
	}
	q.Set("master_set", master)
	if db != "" {
		q.Set("db", db)
	}
	scheme := "redis"
	if strings.HasPrefix(strings.ToLower(u.Scheme), "rediss") {
		scheme = "rediss"
	}
	v := url.URL{Scheme: scheme, User: u.User, Host: host, RawQuery: q.Encode()}
	o, err := rueidis.ParseURL(v.String())
	if err != nil {
		return bad("%v", err)
	}
	if o.TLSConfig != nil {
		o.Sentinel.TLSConfig = o.TLSConfig.Clone()
	}
	o.Sentinel.Dialer = o.Dialer
	return o, nil
}

// splitHosts splits "h1:p1,h2,h3:p3" into addresses, giving those without
// a port defPort.
func splitHosts(s, defPort string) ([]string, error) {
	var addrs []string
	for _, h := range strings.Split(s, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, errors.New("empty host in the list")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort
			if strings.Contains(host, ":") && net.ParseIP(host) == nil {
				return nil, fmt.Errorf("host %q: %v", h, err)
			}
		}
		if err := checkPort(port); err != nil {
			return nil, fmt.Errorf("host %q: %v", h, err)
		}
		addrs = append(addrs, net.JoinHostPort(orLocalhost(host), port))
	}
	return addrs, nil
}

func orLocalhost(h string) string {
	if h == "" {
		return "localhost"
	}
	return h
}

// redactURL returns raw with its credentials replaced: "user:xxxxx@"
// for a user and a password, "xxxxx@" for a lone one (it may be a password
// given without a user). The credentials end at the last '@' (see
// parseDialURL), so a password holding '/', '?', '#' or '@' is hidden
// whole, in a URL or a scheme-less address alike.
func redactURL(raw string) string {
	head, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		head, rest = raw[:i+3], raw[i+3:]
	}
	creds, after, ok := cutCreds(rest)
	if !ok {
		return raw
	}
	if user, _, hasPass := strings.Cut(creds, ":"); hasPass {
		return head + user + ":xxxxx@" + after
	}
	return head + "xxxxx@" + after
}

// dialBound makes Dial's context bound the connections rueidis opens while
// Dial runs (rueidis.NewClient takes no context): their dials end with it,
// and those made are closed if it ends before Dial returns.
type dialBound struct {
	mu    sync.Mutex
	ctx   context.Context // nil once Dial has returned
	stops []func() bool
}

// wrap returns a DialCtxFn that dials as o says (o's own dial function, or
// rueidis's default), bounded by b.
func (b *dialBound) wrap(o rueidis.ClientOption) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	dial := o.DialCtxFn
	if dial == nil && o.DialFn != nil {
		dial = func(_ context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
			return o.DialFn(dst, d, tc)
		}
	}
	if dial == nil { // as rueidis dials without one
		dial = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
			if tc != nil {
				return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
			}
			return d.DialContext(ctx, "tcp", dst)
		}
	}
	return func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		b.mu.Lock()
		bound := b.ctx
		b.mu.Unlock()
		if bound == nil {
			return dial(ctx, dst, d, tc)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(bound, cancel)
		conn, err := dial(ctx, dst, d, tc)
		stop()
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		if b.ctx != nil { // the handshake that follows ends with it too
			b.stops = append(b.stops, context.AfterFunc(b.ctx, func() { conn.Close() }))
		}
		b.mu.Unlock()
		return conn, nil
	}
}

// done ends the bound: connections made from now on live on their own.
func (b *dialBound) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ctx = nil
	for _, stop := range b.stops {
		stop()
	}
	b.stops = nil
}
